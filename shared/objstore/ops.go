package objstore

// Op names one kind of store request, for counters, metrics and fault rules.
type Op uint8

// The request kinds. A DeleteMany counts as one request per call (S3 sends
// one DeleteObjects per 1000 keys).
const (
	OpPut Op = iota
	OpGet
	OpHead
	OpDelete
	OpDeleteMany
	OpList
	OpMultipartCreate
	OpMultipartPart
	OpMultipartCopy
	OpMultipartComplete
	OpMultipartAbort
	// NumOps is the number of kinds, for arrays indexed by Op.
	NumOps
)

var opNames = [NumOps]string{
	OpPut:               "put",
	OpGet:               "get",
	OpHead:              "head",
	OpDelete:            "delete",
	OpDeleteMany:        "delete_many",
	OpList:              "list",
	OpMultipartCreate:   "multipart_create",
	OpMultipartPart:     "multipart_part",
	OpMultipartCopy:     "multipart_copy",
	OpMultipartComplete: "multipart_complete",
	OpMultipartAbort:    "multipart_abort",
}

func (o Op) String() string {
	if o < NumOps {
		return opNames[o]
	}
	return "unknown"
}

// Mutates reports whether the request changes the store, so that a lost
// reply leaves its outcome unknown.
func (o Op) Mutates() bool {
	switch o {
	case OpGet, OpHead, OpList:
		return false
	}
	return o < NumOps
}
