#!/usr/bin/env bash
# Imports pointing upward. Floors: pkg/ = 0 (the bottom: the platform client and
# the stage contract), internal/ = 1, the root package, cmd/ and functions/ = 2.
# An import is upward when the importer stands on a lower floor than what it imports;
# "stage to stage" lists imports between the stage packages (poller, dispatcher, replier).
cd "$1"; mod=$(go list -m)
go list -f '{{.ImportPath}}{{range .Imports}} {{.}}{{end}}' ./... 2>/dev/null | awk -v m="$mod" '
function floor(p){ sub("^" m, "", p); if (p ~ "^/pkg/") return 0; if (p ~ "^/internal/") return 1; return 2 }
function stage(p){ return p ~ "/internal/(poller|dispatcher|replier)$" }
{ for (i=2;i<=NF;i++) if (index($i, m)==1) { if (floor($1) < floor($i)) { up++; print "up: " $1 " -> " $i } ; if (stage($1) && stage($i)) { ss++; print "stage: " $1 " -> " $i } } }
END { printf "upward %d, stage-to-stage %d\n", up, ss }'
