package verify

import (
	"errors"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/starlog/starlog/shared/api"
)

// stored is the record the Kafka face appends for r, marked as the first
// record of an idempotent producer's batch (star/kafka chunksOf), at seq.
func stored(r *kgo.Record, seq uint64, marked bool) api.Record {
	s := kafkaRecord(r)
	if marked {
		s.Headers = append(s.Headers, api.ProducerHeaders(api.ProducerMark{ID: "kafka-7", Epoch: 0, Seq: 3, Records: 2})...)
	}
	s.SeqNum = seq
	return s
}

// A produced record's hash, known before the call, is the hash of what
// an S2 read returns, whether the face marked it or not; the key and the
// headers still count.
func TestKafkaRecordHash(t *testing.T) {
	r := &kgo.Record{Key: []byte("k"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("1")}}}
	in := kafkaRecord(r)
	want := RecordHash(&in)
	for _, marked := range []bool{false, true} {
		s := stored(r, 0, marked)
		if got := RecordHash(&s); got != want {
			t.Errorf("marked %v: read back as %x, produced as %x", marked, got, want)
		}
	}
	noKey := kafkaRecord(&kgo.Record{Value: []byte("v"), Headers: r.Headers})
	noHeader := kafkaRecord(&kgo.Record{Key: []byte("k"), Value: []byte("v")})
	if RecordHash(&noKey) == want || RecordHash(&noHeader) == want {
		t.Error("a record without its key or header hashes as with it")
	}
	if s, p, ok := topicOf(TopicStream("lin-r3", 4)); !ok || s != "lin-r3" || p != 4 {
		t.Errorf("topicOf(TopicStream) = %q, %d, %v", s, p, ok)
	}
}

// kafkaHistory records an S2 append acked at 0, then a Kafka produce of
// one record acked at kOffset, then a read from 0 returning got.
func kafkaHistory(kOffset int64, kErr error, got ...api.Record) (*History, *kgo.Record) {
	h := NewHistory()
	_, a := batchOf("a")
	h.RecordAppend(0, &Input{Stream: "t/0", Kind: KindAppend, Records: a}, h.Now(), ack(0, 1), nil)
	kr := &kgo.Record{Key: []byte("k"), Value: []byte("t/0/k1/o1/r0")}
	s := kafkaRecord(kr)
	h.RecordKafkaProduce(1, &Input{Stream: "t/0", Kind: KindAppend, Records: []uint64{RecordHash(&s)}}, h.Now(), kOffset, kErr)
	h.RecordRead(2, &Input{Stream: "t/0", Kind: KindRead, From: 0, Count: 10}, h.Now(), &api.ReadBatch{Records: got}, nil)
	return h, kr
}

func readBackOf(rs ...api.Record) map[string][]uint64 {
	var hs []uint64
	for i := range rs {
		hs = append(hs, RecordHash(&rs[i]))
	}
	return map[string][]uint64{"t/0": hs}
}

// The checker finds a Kafka ack whose offset holds another record, and a
// produce applied twice; a clean history (the record marked, as the face
// stores it) checks out, an acknowledged and an indefinite one alike.
func TestKafkaHistoryAnomalies(t *testing.T) {
	a, _ := batchOf("a")
	a[0].SeqNum = 0
	kr := &kgo.Record{Key: []byte("k"), Value: []byte("t/0/k1/o1/r0")}
	other := api.Record{Body: []byte("someone else's"), SeqNum: 1}

	cases := []struct {
		name string
		err  error
		got  []api.Record
		ok   bool
	}{
		{"clean", nil, []api.Record{a[0], stored(kr, 1, true)}, true},
		{"indefinite, applied", errors.New("kafka produce: timed out"), []api.Record{a[0], stored(kr, 1, true)}, true},
		{"indefinite, not applied", errors.New("kafka produce: timed out"), []api.Record{a[0]}, true},
		{"ack's offset holds another record", nil, []api.Record{a[0], other}, false},
		{"applied twice", nil, []api.Record{a[0], stored(kr, 1, true), stored(kr, 2, false)}, false},
		{"indefinite, applied twice", errors.New("kafka produce: timed out"), []api.Record{a[0], stored(kr, 1, true), stored(kr, 2, false)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kErr := tc.err
			if kErr != nil {
				kErr = &errKafkaIndefinite{msg: kErr.Error()}
			}
			h, _ := kafkaHistory(1, kErr, tc.got...)
			res := porcupine.CheckOperationsTimeout(Model(), h.Operations(), 0)
			_, bad := VerifyAcks(h, readBackOf(tc.got...), nil)
			if st := h.Stats(); st.KafkaProduces != 1 || (st.KafkaAcked == 1) != (tc.err == nil) {
				t.Fatalf("stats %+v", st)
			}
			found := res != porcupine.Ok || len(bad) > 0
			if found == tc.ok {
				t.Fatalf("check %v, read-back violations %v: want an anomaly found = %v", res, bad, !tc.ok)
			}
		})
	}
}
