#!/usr/bin/env bash
# Build the hammingbird memory harness (benchmarks/bench_memory.py runs it when the Python
# package `hammingbird` cannot be imported). Offline but for one download from PyPI:
#
#   apt-get install librust-hashbrown-dev librust-rayon-dev librust-rustc-hash-dev  # once
#   bash benchmarks/peers/hammingbird/build.sh
#
# 1. fetches hammingbird's sdist 0.5.0 from PyPI (its JSON API; the file's SHA-256 is checked),
#    or takes HAMMINGBIRD_SDIST=/path/to/hammingbird-0.5.0.tar.gz, and unpacks it into .build/;
# 2. patches two version requirements of hammingbird-core's Cargo.toml there (the only change to
#    its files): hashbrown "0.15" -> "0.12" and rayon "1.10" -> "1.6", the versions Debian
#    bookworm packages (rustc-hash 2 comes from shims/rustc-hash, over Debian's 1.1);
# 3. builds target/release/hammingbird-harness with `cargo build --release --offline` from
#    Debian's crates in /usr/share/cargo/registry (.cargo/config.toml replaces crates.io);
# 4. runs its self-test: planted near-duplicates, the index's answers against brute force.
#
# Exit status: 0 built and checked; 2 something missing (the message says what); other: the
# failing step's.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
VERSION="0.5.0"
SHA256="d0477136eb6fdfc8f6ff251272c404131fa789852eade7d0fbeb18003e681dec"
REGISTRY="/usr/share/cargo/registry"
BUILD="$HERE/.build"
SDIST="$BUILD/hammingbird-$VERSION.tar.gz"
SOURCE="$BUILD/hammingbird-$VERSION"

missing() {
    echo "build.sh: $1" >&2
    exit 2
}

command -v cargo >/dev/null || missing "no cargo on PATH (rustc and cargo >= 1.70 are needed)"
for crate in hashbrown-0.12 rayon-1.6 rustc-hash-1.1; do
    compgen -G "$REGISTRY/$crate.*" >/dev/null || missing "no $crate.* in $REGISTRY: \
apt-get install librust-hashbrown-dev librust-rayon-dev librust-rustc-hash-dev"
done

mkdir -p "$BUILD"
if [[ -n "${HAMMINGBIRD_SDIST:-}" ]]; then
    cp "$HAMMINGBIRD_SDIST" "$SDIST"
elif [[ ! -f "$SDIST" ]]; then
    url="$(curl -fsS https://pypi.org/pypi/hammingbird/json | python3 -c '
import json, sys
files = json.load(sys.stdin)["releases"]["'"$VERSION"'"]
print(next(f["url"] for f in files if f["packagetype"] == "sdist"))')" ||
        missing "cannot find the sdist of hammingbird $VERSION on PyPI (set HAMMINGBIRD_SDIST)"
    curl -fsS -o "$SDIST.part" "$url" || missing "cannot download $url"
    mv "$SDIST.part" "$SDIST"
fi
echo "$SHA256  $SDIST" | sha256sum --check --quiet ||
    missing "$SDIST is not hammingbird $VERSION's sdist (SHA-256 differs); delete it"

rm -rf "$SOURCE"
tar -xzf "$SDIST" -C "$BUILD"
manifest="$SOURCE/hammingbird-core/Cargo.toml"
sed -i -e 's/^hashbrown = "0\.15"$/hashbrown = "0.12"/' -e 's/^rayon = "1\.10"$/rayon = "1.6"/' \
    "$manifest"
grep -q '^hashbrown = "0.12"$' "$manifest" && grep -q '^rayon = "1.6"$' "$manifest" ||
    missing "$manifest: the expected hashbrown/rayon lines were not found; not patched"

cd "$HERE"
cargo build --release --offline
./target/release/hammingbird-harness selftest
