# shellcheck shell=bash
# A directory written the way the kubelet writes a mounted ConfigMap or Secret volume
# (pkg/volume/util/atomic_writer.go), for meshdns's MESHDNS_CONFIG_DIR and TLS files:
#
#   DIR/..2026_12_01_02_13_08.123456789/KEY   the payload, one file per key
#   DIR/..data -> ..2026_12_01_02_13_08.123456789
#   DIR/KEY -> ..data/KEY                      one symlink per key, never changed
#
#   configmap_write DIR KEY=VALUE...   (or KEY=@FILE: the content of FILE)
#       The whole payload, as an update of the volume: a new timestamped directory, a symlink
#       ..data_tmp to it renamed over ..data (the one atomic step, and the inotify event meshdns
#       waits for), symlinks for new keys, removal of keys no longer in the payload, then of the
#       old timestamped directory. VALUE gets a trailing newline, as a ConfigMap's often has.
#
# Usable on its own: bash tests/e2e/configmap.sh DIR KEY=VALUE...
configmap_write() {
	local dir=$1 ts old kv key link
	shift
	mkdir -p "$dir" || return 1
	ts=$(mktemp -d "$dir/..$(date -u +%Y_%m_%d_%H_%M_%S).XXXXXXXXX") || return 1
	chmod 755 "$ts"
	for kv in "$@"; do
		key=${kv%%=*}
		if [[ ${kv#*=} == @* ]]; then
			cp "${kv#*=@}" "$ts/$key" || return 1
		else
			printf '%s\n' "${kv#*=}" >"$ts/$key" || return 1
		fi
	done
	old=$(readlink "$dir/..data" 2>/dev/null)
	ln -sfn "${ts##*/}" "$dir/..data_tmp" || return 1
	mv -fT "$dir/..data_tmp" "$dir/..data" || return 1
	for kv in "$@"; do
		key=${kv%%=*}
		[[ -L $dir/$key ]] || ln -s "..data/$key" "$dir/$key" || return 1
	done
	for link in "$dir"/*; do # keys gone from the payload: their symlinks now dangle
		[[ -L $link && ! -e $link ]] && rm -f "$link"
	done
	if [[ -n $old && $old != "${ts##*/}" ]]; then rm -rf "${dir:?}/$old"; fi
	return 0
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
	if (($# < 2)); then
		echo "usage: $0 DIR KEY=VALUE|KEY=@FILE..." >&2
		exit 2
	fi
	configmap_write "$@"
fi
