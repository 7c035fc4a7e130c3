package dialect

import (
	"errors"
	"strings"
	"testing"
	"unicode"

	"github.com/agentstore/agentstore/repo"
)

// render writes terms back as a canonical query, for comparisons.
func render(ts []SearchTerm) string {
	var parts []string
	for _, t := range ts {
		var ws []string
		for _, w := range t.Words {
			s := w.Text
			if w.Prefix {
				s += "*"
			}
			ws = append(ws, s)
		}
		p := strings.Join(ws, " ")
		if len(ws) > 1 {
			p = `"` + p + `"`
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

func TestParseSearchQuery(t *testing.T) {
	for q, want := range map[string]string{
		"foo":                   "foo",
		"Foo BAR":               "foo bar",
		`"quick brown" fox`:     `"quick brown" fox`,
		`"quick bro*"`:          `"quick bro*"`,
		"rotat*":                "rotat*",
		"don't":                 `"don t"`,
		"sessions_search.go":    `"sessions search go"`,
		`"unterminated phrase`:  `"unterminated phrase"`,
		"a OR b":                "a or b",
		"NEAR(a b)":             `"near a" b`,
		"col:foo":               `"col foo"`,
		"-foo +bar":             "foo bar",
		`foo"bar"baz`:           `foo bar baz`,
		"naïve café 日本語":        "naïve café 日本語",
		"e\u0301t\u00e9":        "e\u0301t\u00e9",
		"'; DROP TABLE x; --":   `drop table x`,
		"  spaced \t out\n":     "spaced out",
		"a\ue000b":              `"a b"`,
		"*foo":                  "foo",
		"fo*o":                  `"fo* o"`,
		`"" x ""`:               "x",
		"x::tsvector & y <-> z": `"x tsvector" y z`,
	} {
		terms, err := ParseSearchQuery(q)
		if err != nil {
			t.Errorf("%q: %v", q, err)
			continue
		}
		if got := render(terms); got != want {
			t.Errorf("%q parsed as %s, want %s", q, got, want)
		}
	}
	for _, q := range []string{"", " ", `""`, `"`, "*", "()", "?!", "🙂", "\u0301", "\x00", "a\x00", "\xff",
		strings.Repeat("a ", repo.MaxSearchTerms+1), strings.Repeat("a", repo.MaxSearchQueryLen+1)} {
		if _, err := ParseSearchQuery(q); !errors.Is(err, repo.ErrInvalidInput) {
			t.Errorf("%q: %v, want ErrInvalidInput", q, err)
		}
	}
}

// FuzzParseSearchQuery: any input parses or is ErrInvalidInput, and every
// word holds only letters, digits and marks (at least one letter or
// digit), lower-cased.
func FuzzParseSearchQuery(f *testing.F) {
	for _, s := range []string{"foo", `"a b" c*`, "NEAR(x)", "\xff", `"`, "a:b-c'd"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, q string) {
		terms, err := ParseSearchQuery(q)
		if err != nil {
			if !errors.Is(err, repo.ErrInvalidInput) {
				t.Fatalf("%q: %v", q, err)
			}
			return
		}
		n := 0
		for _, tm := range terms {
			if len(tm.Words) == 0 {
				t.Fatalf("%q: empty term", q)
			}
			for _, w := range tm.Words {
				n++
				letter := false
				for _, r := range w.Text {
					if !isWordRune(r) {
						t.Fatalf("%q: word %q holds %q", q, w.Text, r)
					}
					letter = letter || unicode.IsLetter(r) || unicode.IsNumber(r)
				}
				if !letter || w.Text != strings.ToLower(w.Text) {
					t.Fatalf("%q: word %q", q, w.Text)
				}
			}
		}
		if n == 0 || n > repo.MaxSearchTerms {
			t.Fatalf("%q: %d words", q, n)
		}
	})
}

func TestSearchSnippet(t *testing.T) {
	terms := func(q string) []SearchTerm {
		ts, err := ParseSearchQuery(q)
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	mark := func(s string) string {
		return strings.NewReplacer(SnippetOpen, "[", SnippetClose, "]").Replace(s)
	}
	long := strings.Repeat("lorem ipsum ", 40) + "the Kangaroo jumped" + strings.Repeat(" dolor sit", 40)
	for _, c := range []struct {
		text, q, want string
		words         int
	}{
		{"Where is the kangaroo? The kangaroo is here.", "kangaroo", "Where is the [kangaroo]? The [kangaroo] is here.", 30},
		{"The quick brown fox", `"quick brown"`, "The [quick] [brown] fox", 30},
		{"The quick brown fox", `"brown quick"`, "The quick brown fox", 30},
		{"Quickly, quickly: running", "quick*", "[Quickly], [quickly]: running", 30},
		{"don't stop", "don't", "[don]'[t] stop", 30},
		{"a b c d e f g h", "h", "… f g [h]", 3},
		{"a b c d e f g h", "b", "… [b] c d …", 3},
		{"a b c d e f g h", "b", "a [b] c d …", 4},
		{" (quoted \"kangaroo\") \n", "kangaroo", `(quoted "[kangaroo]")`, 30},
		{"nothing here", "zebra", "nothing …", 1},
		{"", "zebra", "", 30},
		{long, "kangaroo", "… lorem ipsum lorem ipsum lorem ipsum the [Kangaroo] jumped dolor sit dolor sit dolor sit dolor sit dolor sit dolor sit dolor sit dolor sit dolor sit dolor sit dolor …", 30},
	} {
		if got := mark(SearchSnippet(c.text, terms(c.q), c.words)); got != c.want {
			t.Errorf("SearchSnippet(%q, %q, %d) = %q, want %q", c.text, c.q, c.words, got, c.want)
		}
	}
}
