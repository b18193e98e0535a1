package mem_test

import (
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/objstore/objstoretest"
)

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) (objstore.Store, []string) {
		names := []string{"bucket-a", "bucket-b"}
		s, err := mem.New(names...)
		if err != nil {
			t.Fatal(err)
		}
		return s, names
	})
}
