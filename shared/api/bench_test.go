package api

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/starlog/starlog/shared/api/s2pb"
)

// benchBatch is 100 records of 1 KiB text bodies with two headers.
func benchBatch() *ReadBatch {
	b := &ReadBatch{Tail: &StreamPosition{SeqNum: 1100, Timestamp: 1700000000100}}
	body := bytes.Repeat([]byte("0123456789abcdef"), 64)
	for i := 0; i < 100; i++ {
		b.Records = append(b.Records, Record{
			SeqNum:    uint64(1000 + i),
			Timestamp: Uint64(1700000000000 + uint64(i)),
			Headers:   []Header{{[]byte("content-type"), []byte("text/plain")}, {[]byte("k"), []byte(fmt.Sprint(i))}},
			Body:      body,
		})
	}
	return b
}

func BenchmarkEncodeReadBatch(b *testing.B) {
	batch := benchBatch()
	bytesPer := int64(MeteredBytes(batch.Records))
	b.Run("json-raw", func(b *testing.B) {
		b.SetBytes(bytesPer)
		var dst []byte
		for b.Loop() {
			dst = AppendReadBatchJSON(dst[:0], batch, FormatRaw)
		}
	})
	b.Run("json-base64", func(b *testing.B) {
		b.SetBytes(bytesPer)
		var dst []byte
		for b.Loop() {
			dst = AppendReadBatchJSON(dst[:0], batch, FormatBase64)
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.SetBytes(bytesPer)
		var dst []byte
		for b.Loop() {
			dst = AppendReadBatchProto(dst[:0], batch)
		}
	})
	b.Run("proto-generated", func(b *testing.B) {
		// The generated path, for comparison: build the message, marshal.
		b.SetBytes(bytesPer)
		for b.Loop() {
			m := &s2pb.ReadBatch{Tail: positionToPB(*batch.Tail)}
			for i := range batch.Records {
				r := &batch.Records[i]
				m.Records = append(m.Records, &s2pb.SequencedRecord{SeqNum: r.SeqNum, Timestamp: *r.Timestamp, Headers: headersToPB(r.Headers), Body: r.Body})
			}
			if _, err := proto.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkDecodeAppend(b *testing.B) {
	batch := benchBatch()
	in := &AppendInput{Records: batch.Records}
	bytesPer := int64(MeteredBytes(in.Records))
	pb, _ := EncodeAppendProto(in)
	b.Run("proto", func(b *testing.B) {
		b.SetBytes(bytesPer)
		for b.Loop() {
			if _, err := DecodeAppendProto(pb); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkFrames(b *testing.B) {
	payload := EncodeReadBatchProto(benchBatch())
	for _, c := range []Compression{CompressionNone, CompressionGzip, CompressionZstd} {
		var stream bytes.Buffer
		w := NewFrameWriter(&stream, c)
		_ = w.WriteMessage(payload)
		frame := bytes.Clone(stream.Bytes())
		b.Run("write-"+c.String(), func(b *testing.B) {
			w := NewFrameWriter(io.Discard, c)
			defer w.Close()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				if err := w.WriteMessage(payload); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("read-"+c.String(), func(b *testing.B) {
			r := bytes.NewReader(frame)
			fr := NewFrameReader(r)
			defer fr.Close()
			b.SetBytes(int64(len(payload)))
			for b.Loop() {
				r.Reset(frame)
				if _, err := fr.Next(); err != nil {
					b.Fatal(err)
				}
			}
		})
		w.Close()
	}
}

func BenchmarkDecodeAppendJSON(b *testing.B) {
	in := &AppendInput{Records: benchBatch().Records}
	bytesPer := int64(MeteredBytes(in.Records))
	for _, f := range []Format{FormatRaw, FormatBase64} {
		js, _ := EncodeAppendJSON(in, f)
		for _, d := range []struct {
			name   string
			decode func([]byte, Format) (*AppendInput, *Error)
		}{{"scanner", DecodeAppendJSON}, {"encoding-json", decodeAppendJSONRef}} {
			b.Run(f.String()+"/"+d.name, func(b *testing.B) {
				b.SetBytes(bytesPer)
				for b.Loop() {
					if _, err := d.decode(js, f); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
