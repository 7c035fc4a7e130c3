package agentstore_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// BenchmarkContentCodec measures what content encryption costs (docs/encryption.md):
// an append of one message with ~200 bytes of content and metadata, and a
// Load of a 100-message session, with and without an AES-GCM codec, on
// each dialect. "interleaved" alternates the two Stores of one database,
// so that machine load hits both, and reports their ratio
// (with/without):
//
//	go test -run '^$' -bench 'BenchmarkContentCodec' -benchtime 200x .
func BenchmarkContentCodec(b *testing.B) {
	codec, err := agentstore.NewAESGCMCodec("k1", map[string][]byte{"k1": bytes.Repeat([]byte{9}, 32)})
	if err != nil {
		b.Fatal(err)
	}
	body := strings.Repeat("some message text of moderate length ", 5)
	msg := func(id string) repo.Message {
		return repo.Message{ID: id, Role: repo.RoleUser, Content: text(body),
			Metadata: []byte(`{"tool":"search","ok":true}`), Usage: &repo.TokenUsage{InputTokens: 100, OutputTokens: 20}}
	}
	for _, d := range dialects {
		for _, op := range []string{"append", "load100"} {
			b.Run(fmt.Sprintf("%s/%s/interleaved", d, op), func(b *testing.B) {
				h := newHarness(b, d)
				ctx := context.Background()
				stores := []*agentstore.Store{h.New(b), h.Open(b, agentstore.WithContentCodec(codec))}
				ids := make([]repo.Session, 2)
				for i, st := range stores {
					s := repo.NewSession()
					if err := st.Sessions().Save(ctx, s); err != nil {
						b.Fatal(err)
					}
					ids[i] = *s
					if op == "load100" {
						msgs := make([]repo.Message, 100)
						for j := range msgs {
							msgs[j] = msg(fmt.Sprint("m", j))
						}
						if _, err := st.Sessions().AppendMessages(ctx, s.ID, msgs...); err != nil {
							b.Fatal(err)
						}
					}
				}
				var spent [2]time.Duration
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					for k, st := range stores {
						t0 := time.Now()
						var err error
						if op == "append" {
							_, err = st.Sessions().AppendMessages(ctx, ids[k].ID, msg(fmt.Sprint("a", i)))
						} else {
							var s *repo.Session
							s, err = st.Sessions().Load(ctx, ids[k].ID)
							if err == nil && len(s.Messages) != 100 {
								err = fmt.Errorf("loaded %d messages", len(s.Messages))
							}
						}
						if err != nil {
							b.Fatal(err)
						}
						spent[k] += time.Since(t0)
					}
				}
				b.ReportMetric(float64(spent[0].Microseconds())/float64(b.N), "plain-µs/op")
				b.ReportMetric(float64(spent[1].Microseconds())/float64(b.N), "codec-µs/op")
				b.ReportMetric(float64(spent[1])/float64(spent[0]), "ratio")
			})
		}
	}
}
