package kafka

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

// codeOf maps an error of the star to a Kafka error code. Retryable
// failures map to codes Kafka clients retry; a 404 is an unknown
// partition (its topic was deleted meanwhile).
func codeOf(err error) int16 {
	if err == nil {
		return 0
	}
	var nl *node.NotLeaderError
	if errors.As(err, &nl) {
		return kerr.NotLeaderForPartition.Code
	}
	if errors.Is(err, errNoTopic) {
		return kerr.UnknownTopicOrPartition.Code
	}
	var me *metaError
	if errors.As(err, &me) {
		return kerr.KafkaStorageError.Code // the metastore: retry
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return kerr.RequestTimedOut.Code
	}
	var ae *api.Error
	if !errors.As(err, &ae) {
		return kerr.UnknownServerError.Code
	}
	if ae.Code == api.CodeQuotaExhausted {
		return kerr.PolicyViolation.Code // a basin's quota: definite, not retried, as S2's 403
	}
	switch ae.Status {
	case 403:
		return kerr.TopicAuthorizationFailed.Code
	case 404:
		return kerr.UnknownTopicOrPartition.Code
	case 409:
		if ae.Code == api.CodeStreamDeletionPending || ae.Code == api.CodeBasinDeletionPending {
			return kerr.UnknownTopicOrPartition.Code // being deleted
		}
	case 408:
		return kerr.RequestTimedOut.Code
	case 416:
		return kerr.OffsetOutOfRange.Code
	case 429, 503:
		if ae.Definite() {
			return kerr.NotEnoughReplicas.Code // nothing done: retry
		}
		return kerr.RequestTimedOut.Code // may have been done: retry
	case 400, 413, 422:
		return kerr.InvalidRequest.Code
	}
	if ae.Retryable() {
		return kerr.RequestTimedOut.Code
	}
	return kerr.UnknownServerError.Code
}

// msgOf is the message a response carries beside a code (nil for none).
func msgOf(err error) *string {
	if err == nil {
		return nil
	}
	m := errMessage(err)
	return &m
}
