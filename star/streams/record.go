package streams

import (
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/star/facade"
)

func facadeRecord(in facade.Input) format.Record {
	return format.Record{Headers: in.Headers, Body: in.Body}
}
