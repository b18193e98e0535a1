package kafka_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Records produced with each compression codec read back from the start
// of the partition, key, value, headers and timestamp intact, at offsets
// that are the stream's seq nums.
func TestProduceEachCompressionConsumeFromStart(t *testing.T) {
	s := startStar(t, true)
	createTopic(t, s.admin(), "events", 2)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()},
	}
	ts := time.UnixMilli(1_700_000_000_000)
	var want []string
	for i, c := range codecs {
		p := s.admin(kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic("events"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var recs []*kgo.Record
		for j := range 20 {
			v := fmt.Sprintf("%s-%02d", c.name, j)
			recs = append(recs, &kgo.Record{Key: []byte("k-" + v), Value: []byte(v + "-" + string(make([]byte, 100))),
				Headers: []kgo.RecordHeader{{Key: "codec", Value: []byte(c.name)}}, Timestamp: ts.Add(time.Duration(i*20+j) * time.Millisecond)})
			want = append(want, v)
		}
		if err := p.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", c.name, err)
		}
		if recs[0].Offset != int64(i*20) || recs[19].Offset != int64(i*20+19) {
			t.Fatalf("%s: offsets %d..%d, want %d..%d", c.name, recs[0].Offset, recs[19].Offset, i*20, i*20+19)
		}
	}
	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"events": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < len(want) {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value[:len(r.Value)-101])
			if r.Offset != int64(len(got)) {
				t.Errorf("record %q at offset %d, want %d", v, r.Offset, len(got))
			}
			if string(r.Key) != "k-"+v || len(r.Headers) != 1 || r.Headers[0].Key != "codec" {
				t.Errorf("record %q: key %q headers %v", v, r.Key, r.Headers)
			}
			if wantTS := ts.Add(time.Duration(len(got)) * time.Millisecond); !r.Timestamp.Equal(wantTS) {
				t.Errorf("record %q: timestamp %v, want %v", v, r.Timestamp, wantTS)
			}
			got = append(got, v)
		})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("consumed %v\nwant %v", got, want)
	}
}
