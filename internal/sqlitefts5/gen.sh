#!/bin/sh
# Regenerates fts5.c, sqlite3ext.h and sqlite3-binding.h from the
# mattn/go-sqlite3 module go.mod requires (see the comment atop fts5.c).
set -e
cd "$(dirname "$0")"
M=$(go list -m -f '{{.Dir}}' github.com/mattn/go-sqlite3)
V=$(go list -m -f '{{.Version}}' github.com/mattn/go-sqlite3)
cp "$M/sqlite3ext.h" "$M/sqlite3-binding.h" .
chmod u+w sqlite3ext.h sqlite3-binding.h
head -10 fts5.c | sed "s/go-sqlite3 v[0-9.]*/go-sqlite3 $V/" > fts5.c.new
printf '#define NDEBUG 1\n#include <stdint.h>\n#include <string.h>\n#include <stdlib.h>\n#include <stdio.h>\n#include <stdarg.h>\n#include <assert.h>\n#include <math.h>\n#include "sqlite3ext.h"\n' >> fts5.c.new
sed -n '/^\/\*\*\*\*\*\*\*\*\*\*\*\*\*\* Begin file fts5\.c/,/^\/\*\*\*\*\*\*\*\*\*\*\*\*\*\* End of fts5\.c/p' "$M/sqlite3-binding.c" >> fts5.c.new
mv fts5.c.new fts5.c
