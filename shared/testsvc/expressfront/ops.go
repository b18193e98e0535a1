package expressfront

import (
	"net/http"
	"net/url"
	"strings"
)

// Op names one S3 operation as the front recognises it.
type Op string

// The operations a directory bucket serves on its zonal endpoint (S3 User
// Guide, "S3 Express One Zone APIs"), plus the bucket-level ones the SDK
// sends there. Anything else on a directory bucket is refused 501.
const (
	OpCreateSession           Op = "CreateSession"
	OpHeadBucket              Op = "HeadBucket"
	OpListObjectsV2           Op = "ListObjectsV2"
	OpListMultipartUploads    Op = "ListMultipartUploads"
	OpDeleteObjects           Op = "DeleteObjects"
	OpGetObject               Op = "GetObject"
	OpHeadObject              Op = "HeadObject"
	OpGetObjectAttributes     Op = "GetObjectAttributes"
	OpPutObject               Op = "PutObject"
	OpCopyObject              Op = "CopyObject"
	OpDeleteObject            Op = "DeleteObject"
	OpCreateMultipartUpload   Op = "CreateMultipartUpload"
	OpUploadPart              Op = "UploadPart"
	OpUploadPartCopy          Op = "UploadPartCopy"
	OpCompleteMultipartUpload Op = "CompleteMultipartUpload"
	OpAbortMultipartUpload    Op = "AbortMultipartUpload"
	OpListParts               Op = "ListParts"
	// OpUnsupported is anything else (ACLs, tagging, ListObjects v1, …).
	OpUnsupported Op = "Unsupported"
)

// identify names the operation of a request on bucket with key ("" for
// bucket-level requests). The SDK's own "x-id" query parameter is ignored.
func identify(method, key string, q url.Values, h http.Header) Op {
	has := func(k string) bool { _, ok := q[k]; return ok }
	copySource := h.Get("X-Amz-Copy-Source") != ""
	if key == "" {
		switch {
		case method == http.MethodGet && has("session"):
			return OpCreateSession
		case method == http.MethodGet && q.Get("list-type") == "2":
			return OpListObjectsV2
		case method == http.MethodGet && has("uploads"):
			return OpListMultipartUploads
		case method == http.MethodHead && len(withoutXID(q)) == 0:
			return OpHeadBucket
		case method == http.MethodPost && has("delete"):
			return OpDeleteObjects
		}
		return OpUnsupported
	}
	switch method {
	case http.MethodGet:
		switch {
		case has("uploadId"):
			return OpListParts
		case has("attributes"):
			return OpGetObjectAttributes
		case hasSubresource(q):
			return OpUnsupported
		}
		return OpGetObject
	case http.MethodHead:
		return OpHeadObject
	case http.MethodPut:
		switch {
		case has("uploadId") && has("partNumber") && copySource:
			return OpUploadPartCopy
		case has("uploadId") && has("partNumber"):
			return OpUploadPart
		case hasSubresource(q):
			return OpUnsupported
		case copySource:
			return OpCopyObject
		}
		return OpPutObject
	case http.MethodPost:
		switch {
		case has("uploads"):
			return OpCreateMultipartUpload
		case has("uploadId"):
			return OpCompleteMultipartUpload
		}
	case http.MethodDelete:
		switch {
		case has("uploadId"):
			return OpAbortMultipartUpload
		case hasSubresource(q):
			return OpUnsupported
		}
		return OpDeleteObject
	}
	return OpUnsupported
}

// hasSubresource reports a query naming an object sub-resource the front
// does not serve (acl, tagging, retention, …). Parameters that only tune a
// GET (range-like "partNumber", response-* overrides, versionId) are not
// sub-resources.
func hasSubresource(q url.Values) bool {
	for k := range withoutXID(q) {
		switch {
		case k == "partNumber", k == "versionId", strings.HasPrefix(k, "response-"):
		default:
			return true
		}
	}
	return false
}

func withoutXID(q url.Values) url.Values {
	if _, ok := q["x-id"]; !ok {
		return q
	}
	c := make(url.Values, len(q))
	for k, v := range q {
		if k != "x-id" {
			c[k] = v
		}
	}
	return c
}

// readOnlyOps are the operations a ReadOnly session may run
// (CreateSession's x-amz-create-session-mode in the API reference).
var readOnlyOps = map[Op]bool{
	OpGetObject: true, OpHeadObject: true, OpListObjectsV2: true,
	OpGetObjectAttributes: true, OpListParts: true, OpListMultipartUploads: true,
}

// iamSigned are the operations on a directory bucket that the SDK signs
// with the long-term credentials instead of a session: CreateSession
// itself, and CopyObject, UploadPartCopy and HeadBucket (S3 authorises those
// through s3express:CreateSession on the buckets involved).
var iamSigned = map[Op]bool{
	OpCreateSession: true, OpCopyObject: true, OpUploadPartCopy: true, OpHeadBucket: true,
}

// writes reports whether op changes the bucket it is sent to.
func writes(op Op) bool { return !readOnlyOps[op] && op != OpCreateSession && op != OpHeadBucket }
