#!/usr/bin/env bash
# Builds the meshdns container image offline and smoke-runs it (CI runs this; .ci/run).
#
#   bash image/build.sh                    build localhost/meshdns:<version>, smoke-run it
#   IMAGE=registry.example.com/meshdns/meshdns:0.2.0 bash image/build.sh
#   IMAGE_KEEP_SMOKE=1                     keep the smoke run's directory (configs, logs)
#
# The Dockerfile needs a Docker-compatible builder and the network (two base images, crates.io,
# Debian). This path needs neither registry: a static musl build of the crate
# (cargo build --release --locked --target x86_64-unknown-linux-musl) copied into an empty
# image with buildah (`buildah from scratch`): the binary, a two-line /etc/passwd and
# /etc/group for uid/gid 65532, user 65532:65532, entrypoint /meshdns, ports 53/udp 53/tcp 853/tcp 8443/tcp 9153,
# OCI labels. Same contract as the Dockerfile's image (distroless/static adds CA certificates,
# tzdata and a few more users, none of which meshdns reads).
#
# Smoke run: the image cannot be started with podman here (crun cannot set rlimits in this
# sandbox), so its root filesystem is mounted (`buildah mount`) and the entrypoint is run in it
# with `chroot --userspec=65532:65532`, inside a network namespace of its own (`unshare -n`, only
# loopback): meshdns on 127.0.0.1:5353, a stand-in DNS server (NSD, tests/lib/nsd.sh) on
# 127.0.0.1:5300 as its upstream, one `dig` that must get the stand-in's answer through meshdns.
# No packet leaves that namespace.
#
# Prints the image size (as `buildah images` reports it) and the binary's size, and ends with
# "N passed, M failed". Runs as root on Debian 12; installs buildah, musl-tools, nsd, dnsutils,
# iproute2 with apt-get when missing, and the musl target with rustup.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TARGET=x86_64-unknown-linux-musl
UID_GID=65532:65532
LISTEN_PORT=5353
UPSTREAM_PORT=5300
# The answer the stand-in gives, and so what the smoke query must get through meshdns.
WANT=192.0.2.53

# ---------------------------------------------------------------- smoke (inside unshare -n)
# image/build.sh --smoke ROOTFS WORKDIR: runs in the private network namespace.
SMOKE_PIDS=()
smoke_stop() {
	local p
	for p in "${SMOKE_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
}
smoke() { # ROOTFS WORKDIR
	local rootfs=$1 work=$2 md answer uid rss
	# shellcheck source=tests/lib/nsd.sh
	. "$ROOT/tests/lib/nsd.sh"
	ip link set lo up
	trap smoke_stop EXIT
	mkdir -p "$work/nsd"
	# shellcheck disable=SC2016 # $ORIGIN and $TTL are zone file directives
	printf '$ORIGIN smoke.test.\n$TTL 60\n@ IN SOA ns hostmaster 1 7200 1800 86400 5\n@ IN NS ns\nns IN A 127.0.0.1\nwww IN A %s\n' \
		"$WANT" >"$work/nsd/smoke.test.zone"
	{
		nsd_conf "$work/nsd" 127.0.0.1 'verbosity: 1'
		nsd_zone smoke.test "$work/nsd/smoke.test.zone"
	} | sed "s/port: 53\$/port: $UPSTREAM_PORT/" >"$work/nsd/nsd.conf"
	nsd -d -c "$work/nsd/nsd.conf" >"$work/nsd/out.log" 2>&1 &
	SMOKE_PIDS+=($!)
	env -i MESHDNS_LISTEN="127.0.0.1:$LISTEN_PORT" MESHDNS_ADMIN_LISTEN=127.0.0.1:9153 \
		MESHDNS_UPSTREAMS="127.0.0.1:$UPSTREAM_PORT" MESHDNS_LOG=info \
		"$(command -v chroot)" --userspec="$UID_GID" "$rootfs" /meshdns >"$work/meshdns.log" 2>&1 &
	md=$!
	SMOKE_PIDS+=("$md")
	answer=
	for _ in $(seq 1 50); do
		answer=$(dig @127.0.0.1 -p "$LISTEN_PORT" www.smoke.test A +short +time=1 +tries=1 2>/dev/null || true)
		[[ $answer == "$WANT" ]] && break
		kill -0 "$md" 2>/dev/null || break
		sleep 0.1
	done
	uid=$(awk '/^Uid:/ {print $2}' "/proc/$md/status" 2>/dev/null || echo gone)
	rss=$(awk '/^VmRSS:/ {print $2 " " $3}' "/proc/$md/status" 2>/dev/null || echo gone)
	echo "smoke: answer '$answer', meshdns uid $uid, VmRSS $rss"
	if [[ $answer != "$WANT" || $uid != 65532 ]]; then
		echo "--- meshdns log"
		cat "$work/meshdns.log"
		echo "--- nsd log"
		cat "$work/nsd/out.log" "$work/nsd/nsd.log" 2>/dev/null || true
		return 1
	fi
}
if [[ ${1:-} == --smoke ]]; then
	smoke "$2" "$3"
	exit
fi

# ---------------------------------------------------------------- build (host namespace)
[[ $(id -u) == 0 ]] || { echo "image/build.sh: run as root (buildah storage, chroot, unshare)" >&2; exit 2; }
cd "$ROOT"
PASSED=0
FAILED=0
pass() { echo "PASS $*"; PASSED=$((PASSED + 1)); }
fail() { echo "FAIL $*"; FAILED=$((FAILED + 1)); }

need=()
command -v buildah >/dev/null || need+=(buildah)
command -v musl-gcc >/dev/null || need+=(musl-tools)
command -v nsd >/dev/null || need+=(nsd)
command -v dig >/dev/null || need+=(dnsutils)
command -v ip >/dev/null || need+=(iproute2)
command -v readelf >/dev/null || need+=(binutils)
command -v python3 >/dev/null || need+=(python3)
if ((${#need[@]})); then
	echo "installing ${need[*]} (apt)"
	# nsd's package would start a system service; refuse every service start while installing.
	made_policy=
	if [[ ! -e /usr/sbin/policy-rc.d ]]; then
		printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
	fi
	rc=0
	{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}"; } >/tmp/meshdns-image-apt.log 2>&1 || rc=$?
	[[ -n $made_policy ]] && rm -f /usr/sbin/policy-rc.d
	((rc == 0)) || { tail -20 /tmp/meshdns-image-apt.log >&2; exit 1; }
fi
rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"

VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
IMAGE=${IMAGE:-localhost/meshdns:$VERSION}
BIN=target/$TARGET/release/meshdns

echo "== cargo build --release --locked --target $TARGET"
cargo build --release --locked --target "$TARGET"
# A static binary has no program interpreter (no dynamic loader to find in an empty image).
if ! readelf -l "$BIN" 2>/dev/null | grep -q 'program interpreter'; then
	pass "the binary is static (no program interpreter)"
else
	fail "the binary is static (no program interpreter)"
fi

WORK=$(mktemp -d /tmp/meshdns-image.XXXXXX)
CTR=
SMOKE_CTR=
cleanup() {
	[[ -n $SMOKE_CTR ]] && { buildah umount "$SMOKE_CTR" >/dev/null 2>&1 || true; buildah rm "$SMOKE_CTR" >/dev/null 2>&1 || true; }
	[[ -n $CTR ]] && { buildah rm "$CTR" >/dev/null 2>&1 || true; }
	if [[ -n ${IMAGE_KEEP_SMOKE:-} ]]; then echo "kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

echo "== buildah: $IMAGE from scratch"
printf 'nonroot:x:65532:65532:nonroot:/:/sbin/nologin\n' >"$WORK/passwd"
printf 'nonroot:x:65532:\n' >"$WORK/group"
CTR=$(buildah from scratch)
buildah copy --chmod 0755 "$CTR" "$BIN" /meshdns >/dev/null
buildah copy --chmod 0644 "$CTR" "$WORK/passwd" /etc/passwd >/dev/null
buildah copy --chmod 0644 "$CTR" "$WORK/group" /etc/group >/dev/null
buildah config --user "$UID_GID" --entrypoint '["/meshdns"]' --cmd '' \
	--port 53/udp --port 53/tcp --port 853/tcp --port 8443/tcp --port 9153/tcp \
	--label org.opencontainers.image.title=meshdns \
	--label "org.opencontainers.image.description=DNS stub resolver sidecar for workloads stretched over several Kubernetes clusters" \
	--label org.opencontainers.image.licenses=Apache-2.0 \
	--label "org.opencontainers.image.version=$VERSION" \
	--label "org.opencontainers.image.revision=$REVISION" \
	"$CTR"
old_id=$(buildah images -q --no-trunc "$IMAGE" 2>/dev/null | head -1 || true)
buildah commit --rm -q "$CTR" "$IMAGE" >/dev/null
CTR=
# A rebuild under the same name leaves the previous image untagged: remove it (only that one).
new_id=$(buildah images -q --no-trunc "$IMAGE" | head -1)
if [[ -n $old_id && $old_id != "$new_id" ]]; then buildah rmi "$old_id" >/dev/null 2>&1 || true; fi
pass "buildah committed $IMAGE"

# The image's OCI configuration, as a runtime will read it.
if conf=$(buildah inspect --type image "$IMAGE" | python3 -c '
import json, sys
c = json.load(sys.stdin)["OCIv1"]["config"]
want = {"User": "65532:65532", "Entrypoint": ["/meshdns"],
        "ExposedPorts": ["53/tcp", "53/udp", "8443/tcp", "853/tcp", "9153/tcp"]}
got = {"User": c.get("User"), "Entrypoint": c.get("Entrypoint"),
       "ExposedPorts": sorted(c.get("ExposedPorts") or {})}
print(json.dumps(got))
sys.exit(0 if got == want else 1)'); then
	pass "image config: $conf"
else
	fail "image config: $conf"
fi

echo "== smoke run: the image's root filesystem, chroot as $UID_GID, private network namespace"
SMOKE_CTR=$(buildah from "$IMAGE")
ROOTFS=$(buildah mount "$SMOKE_CTR")
if out=$("$ROOTFS/meshdns" --version 2>&1); then pass "/meshdns --version in the image: $out"; else fail "/meshdns --version: $out"; fi
if unshare -n -- bash "$ROOT/image/build.sh" --smoke "$ROOTFS" "$WORK"; then
	pass "smoke: meshdns from the image (uid 65532) answers www.smoke.test A = $WANT through a stand-in upstream"
else
	fail "smoke: meshdns from the image answers a query through a stand-in upstream"
fi

size=$(buildah images --format '{{.Size}}' "$IMAGE" | head -1)
bin_bytes=$(stat -c %s "$BIN")
echo "image: $IMAGE, size $size (buildah images); binary $bin_bytes bytes ($(numfmt --to=iec-i --suffix=B "$bin_bytes"))"
# README promises at most 4.5 MB: 4 MB until 0.2.0; the DNS-over-TLS server, the admission
# webhook and `meshdns dns-change` (one binary for every mode, one image) took it to 4.39 MB.
if ((bin_bytes <= 4500 * 1000)); then
	pass "image content at most 4.5 MB (binary $bin_bytes bytes)"
else
	fail "image content at most 4.5 MB (binary $bin_bytes bytes)"
fi
echo "$PASSED passed, $FAILED failed"
((FAILED == 0))
