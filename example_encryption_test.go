package agentstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentstore/agentstore"
	"github.com/agentstore/agentstore/repo"
)

// Encrypt message content at rest, read it back, see what the database
// holds, what a Store without the key gets, and rotate to a new key.
func ExampleWithContentCodec() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "agentstore-enc")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	dsn := "sqlite:" + filepath.Join(dir, "agents.db")

	// Keys come from a secret store in a real deployment.
	oldKey, newKey := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	codec, err := agentstore.NewAESGCMCodec("2026-12", map[string][]byte{"2026-12": oldKey})
	if err != nil {
		log.Fatal(err)
	}
	st, err := agentstore.Open(ctx, dsn, agentstore.WithContentCodec(codec))
	if err != nil {
		log.Fatal(err)
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	s := repo.NewSession()
	s.AddMessage(repo.Message{ID: "u1", Role: repo.RoleUser, Content: text("my card number is 4111")})
	if err := st.Sessions().Save(ctx, s); err != nil {
		log.Fatal(err)
	}
	got, err := st.Sessions().Load(ctx, s.ID)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("read back:", string(got.Messages[0].Content))

	var stored string
	if err := st.DB(ctx).Raw("SELECT content FROM " + st.Table("messages")).Scan(&stored).Error; err != nil {
		log.Fatal(err)
	}
	fmt.Println("stored:", strings.HasPrefix(stored, `{"$enc":{"v":1,"kid":"2026-12"`), strings.Contains(stored, "4111"))

	// A Store without the codec gets a typed error naming the key.
	plain, err := agentstore.Open(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer plain.Close()
	_, err = plain.Sessions().Load(ctx, s.ID)
	var ke *agentstore.KeyError
	fmt.Println("without the codec:", errors.As(err, &ke), ke.KeyID, errors.Is(err, agentstore.ErrKeyNotFound))

	// Search refuses over encrypted content.
	_, err = st.Sessions().Search(ctx, repo.SearchParams{Query: "card"})
	fmt.Println("search:", errors.Is(err, agentstore.ErrContentEncrypted))

	// Rotate: the new key active, the old one kept until the rotation ran.
	rotating, err := agentstore.NewAESGCMCodec("2027-06", map[string][]byte{"2027-06": newKey, "2026-12": oldKey})
	if err != nil {
		log.Fatal(err)
	}
	st2, err := agentstore.Open(ctx, dsn, agentstore.WithContentCodec(rotating))
	if err != nil {
		log.Fatal(err)
	}
	defer st2.Close()
	rep, err := st2.RotateContentKeys(ctx, agentstore.RotateParams{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("rotated to %s: %d message value(s)\n", rep.KeyID, rep.Tables["messages"].Reencrypted)
	// Output:
	// read back: [{"text":"my card number is 4111","type":"text"}]
	// stored: true false
	// without the codec: true 2026-12 true
	// search: true
	// rotated to 2027-06: 1 message value(s)
}

// TestContentCodecConfig: NewAESGCMCodec and WithContentCodec refuse bad
// keys, key ids and a nil codec with ErrInvalidConfig; RotateContentKeys
// refuses a batch above MaxRotateBatch.
func TestContentCodecConfig(t *testing.T) {
	t.Parallel()
	k := bytes.Repeat([]byte{7}, 32)
	for name, c := range map[string]struct {
		active string
		keys   map[string][]byte
	}{
		"no keys":        {"k", nil},
		"short key":      {"k", map[string][]byte{"k": k[:15]}},
		"33-byte key":    {"k", map[string][]byte{"k": append(k, 1)}},
		"active missing": {"k2", map[string][]byte{"k": k}},
		"empty id":       {"", map[string][]byte{"": k}},
		"long id":        {strings.Repeat("x", agentstore.MaxKeyIDLen+1), map[string][]byte{strings.Repeat("x", agentstore.MaxKeyIDLen+1): k}},
		"bad UTF-8 id":   {"\xff", map[string][]byte{"\xff": k}},
	} {
		if _, err := agentstore.NewAESGCMCodec(c.active, c.keys); !errors.Is(err, agentstore.ErrInvalidConfig) {
			t.Errorf("%s: NewAESGCMCodec = %v, want ErrInvalidConfig", name, err)
		}
	}
	for _, n := range []int{16, 24, 32} {
		if _, err := agentstore.NewAESGCMCodec("k", map[string][]byte{"k": k[:n]}); err != nil {
			t.Errorf("%d-byte key: %v", n, err)
		}
	}
	if _, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithContentCodec(nil)); !errors.Is(err, agentstore.ErrInvalidConfig) {
		t.Errorf("WithContentCodec(nil) = %v, want ErrInvalidConfig", err)
	}
	c, err := agentstore.NewAESGCMCodec("k", map[string][]byte{"k": k})
	if err != nil {
		t.Fatal(err)
	}
	st, err := agentstore.Open(context.Background(), "sqlite::memory:", agentstore.WithContentCodec(c))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.RotateContentKeys(context.Background(), agentstore.RotateParams{BatchSize: agentstore.MaxRotateBatch + 1}); !errors.Is(err, agentstore.ErrInvalidInput) {
		t.Errorf("batch above the limit = %v, want ErrInvalidInput", err)
	}
	// The codec binds a ciphertext to its additional data and key.
	ct, err := c.Encrypt("k", []byte("hello"), []byte("row 1"))
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := c.Decrypt("k", ct, []byte("row 1")); err != nil || string(pt) != "hello" {
		t.Fatalf("Decrypt = %q, %v", pt, err)
	}
	if _, err := c.Decrypt("k", ct, []byte("row 2")); err == nil {
		t.Fatal("Decrypt with other additional data succeeded")
	}
	if _, err := c.Decrypt("k9", ct, []byte("row 1")); !errors.Is(err, agentstore.ErrKeyNotFound) {
		t.Fatalf("Decrypt with an unknown key = %v, want ErrKeyNotFound", err)
	}
}
