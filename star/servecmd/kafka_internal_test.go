package servecmd

import (
	"log/slog"
	"net"
	"strings"
	"testing"
)

// dev's default Kafka address is optional: taken, the star serves
// without Kafka; an address asked for must be free.
func TestKafkaListenOptional(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	log := slog.New(slog.DiscardHandler)
	f := &kafkaFace{listen: ln.Addr().String(), optional: true}
	if kln, err := f.listenOn(log); kln != nil || err != nil || f.banner(false) != "" {
		t.Fatalf("optional, taken: %v %v %q", kln, err, f.banner(false))
	}
	f.optional = false
	if _, err := f.listenOn(log); err == nil {
		t.Fatal("a taken address asked for did not fail")
	}
	var none *kafkaFace
	if kln, err := none.listenOn(log); kln != nil || err != nil {
		t.Fatal("no Kafka face listened")
	}
	f = &kafkaFace{listen: "127.0.0.1:0", basin: "kafka-topics"}
	kln, err := f.listenOn(log)
	if err != nil {
		t.Fatal(err)
	}
	defer kln.Close()
	if f.banner(false) == "" || !strings.Contains(f.banner(true), "no authentication") {
		t.Fatal("no banner line for a served Kafka face")
	}
}
