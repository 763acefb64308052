#!/bin/bash
# The wheel as a user installs it: scripts/build_wheel.sh builds it; in a fresh
# venv (Debian's system packages visible, for torch; nothing pip-installed)
# `pip install` it, run a torch DDP job under the console script ddprun with
# ddprun.liveness, and one whose hung rank is caught; in a second fresh venv
# build and run a find_package(ddp) program against the installed SDK; a
# broken install gets one line; `pip uninstall` leaves nothing behind.
# Prints the wheel's size and the build and install times. The wheel is built
# in build-wheel/ of the checkout (kept between runs: a rebuild is incremental).
# Exit 77 (skipped) outside CI when the wheel tools (.venv-wheel) are missing.
set -euo pipefail
src=$1 consumer=$2 cmake=$3
here=$(cd "$(dirname "$0")" && pwd)
if [[ ! -x $src/.venv-wheel/bin/auditwheel && ${CI:-} != true ]]; then
  echo "skipped: no wheel tools in $src/.venv-wheel (run scripts/setup.sh)"
  exit 77
fi
stage=$(mktemp -d "${TMPDIR:-/tmp}/ddp-wheel-test.XXXXXX")
trap 'rm -rf "$stage"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
ms() { date +%s%3N; }

t0=$(ms)
wheel=$("$src/scripts/build_wheel.sh" | tail -n 1)
echo "wheel: $(basename "$wheel") $(($(stat -c %s "$wheel") / 1024)) KiB, built in $((($(ms) - t0) / 1000)) s"
# The wheel's build reuses build/'s objects (ccache): each object both build
# the same command line, run with ccache's base dir on the source tree
# (cmake/DdpCcache.cmake), so the hash is the same whoever started build/
# (before: build_wheel.sh's own CCACHE_BASEDIR only, and -Werror whatever
# build/ had: 38 ccache hits of 470 in a fresh clone, 19 minutes).
if [[ -f $src/build/build.ninja && -f $src/build-wheel/build.ninja ]] && command -v ninja >/dev/null; then
  python3 - "$src/build" "$src/build-wheel" <<'PY' || fail "the wheel's build does not compile as build/ does (see above)"
import json, subprocess, sys
def objects(d):
    out = subprocess.run(["ninja", "-C", d, "-t", "compdb"], capture_output=True, text=True, check=True).stdout
    return {e["output"]: e["command"] for e in json.loads(out) if e.get("output", "").endswith(".o")}
build, wheel = objects(sys.argv[1]), objects(sys.argv[2])
shared = sorted(set(build) & set(wheel))
differ = [o for o in shared if build[o] != wheel[o]]
no_base = [o for o in shared if "ccache" in wheel[o] and "CCACHE_BASEDIR=" not in wheel[o]]
print(f"wheel build: {len(shared)} of its {len(wheel)} objects also in build/; "
      f"{len(differ)} with another command line, {len(no_base)} without ccache's base dir")
for o in (differ + no_base)[:1]:
    print(f"{o}:\n  build/:       {build[o]}\n  build-wheel/: {wheel[o]}")
sys.exit(1 if differ or no_base or not shared else 0)
PY
fi

# The tag tells the glibc it needs; no platform-less linux_ tag.
[[ $(basename "$wheel") == ddprun-*-py3-none-manylinux_2_*_x86_64.whl ]] || fail "wheel tag: $wheel"

# The tag tells the truth: no ELF file in the wheel uses a GLIBC_ symbol
# version newer than the tag's glibc (objdump -T), and the tag is not newer
# than the glibc it was built on. (manylinux_2_35 rather than the 2.34 of the
# newest GLIBC_ symbol: GCC 12's libstdc++, GLIBCXX_3.4.30, is 2_35's.)
tag_minor=$(basename "$wheel" | sed -E 's/.*-manylinux_2_([0-9]+)_x86_64\.whl$/\1/')
host_minor=$(getconf GNU_LIBC_VERSION | sed -E 's/^glibc 2\.([0-9]+).*/\1/')
"$src/.venv-wheel/bin/python" -m zipfile -e "$wheel" "$stage/unpacked"
elfs=0 glibc_minor=0 glibcxx=
while IFS= read -r -d '' f; do
  [[ $(head -c 4 "$f" | od -An -tx1 | tr -d ' \n') == 7f454c46 ]] || continue
  elfs=$((elfs + 1))
  syms=$(objdump -T "$f" 2>/dev/null || true)  # nothing for the static ddp-guard
  m=$(grep -oE 'GLIBC_2\.[0-9]+' <<<"$syms" | cut -d. -f2 | sort -n | tail -n 1 || true)
  ((${m:-0} > glibc_minor)) && glibc_minor=$m
  glibcxx=$( (echo "$glibcxx"; grep -oE 'GLIBCXX_[0-9.]+[0-9]' <<<"$syms" || true) | sort -V | tail -n 1)
  ((${m:-0} <= tag_minor)) || fail "${f#"$stage/unpacked/"} needs GLIBC_2.$m, newer than its tag manylinux_2_$tag_minor"
done < <(find "$stage/unpacked" -type f -print0)
((elfs >= 5)) || fail "found only $elfs ELF files in the wheel"
((tag_minor <= host_minor)) || fail "tag manylinux_2_$tag_minor is newer than the build machine's glibc 2.$host_minor"
echo "tag manylinux_2_$tag_minor: $elfs ELF files, newest GLIBC_2.$glibc_minor, newest $glibcxx; built on glibc 2.$host_minor"

# On an older glibc pip finds no wheel to install (the tag says so; no loader
# error at run time); on this machine's it does.
pick() {  # GLIBC_MINOR: does pip pick the wheel for a machine with glibc 2.GLIBC_MINOR?
  local platforms=() m
  for ((m = 17; m <= $1; m++)); do platforms+=(--platform "manylinux_2_${m}_x86_64"); done
  "$src/.venv-wheel/bin/pip" download -q --disable-pip-version-check --no-index --only-binary=:all: \
    --find-links "$(dirname "$wheel")" "${platforms[@]}" -d "$stage/pick-$1" ddprun >/dev/null 2>&1
}
pick $((tag_minor - 1)) && fail "pip would install the wheel on glibc 2.$((tag_minor - 1))"
pick 28 && fail "pip would install the wheel on glibc 2.28"
pick "$host_minor" || fail "pip refuses the wheel on glibc 2.$host_minor (this machine's)"

# Every file and directory: an empty directory left behind counts.
snapshot() { (cd "$1" && find . | LC_ALL=C sort); }
new_venv() {  # DIR [--system-site-packages]
  /usr/bin/python3 -m venv "$@"
  snapshot "$1" > "$1.before"
}
install() {  # VENV
  local t
  t=$(ms)
  "$1/bin/pip" install --disable-pip-version-check --no-input -q --no-index --no-deps "$wheel" \
    || fail "pip install $wheel into $1"
  echo "installed into $(basename "$1") in $(($(ms) - t)) ms"
}
uninstall() {  # VENV: pip uninstall leaves the venv as it was before install
  "$1/bin/pip" uninstall --disable-pip-version-check -y -q ddprun || fail "pip uninstall in $1"
  snapshot "$1" > "$1.after"
  diff "$1.before" "$1.after" || fail "pip uninstall left files behind in $1 (above)"
}

# --- venv 1: a torch user's venv ---------------------------------------------
venv=$stage/venv
new_venv "$venv" --system-site-packages
install "$venv"
prefix=$("$venv/bin/python" -m ddprun --cmake-prefix)
[[ -f $prefix/lib/cmake/ddp/ddpConfig.cmake ]] || fail "--cmake-prefix $prefix has no lib/cmake/ddp"
for f in bin/ddprun bin/ddp-guard bin/ddp-rendezvousd bin/ddp-store share/ddprun/ddp_zygote.py \
         share/ddprun/ddp_zygote_fork.py share/ddprun/ddp_zygote_worker.py \
         share/ddprun/python/sitecustomize.py include/ddp/sdk.hpp; do
  [[ -e $prefix/$f ]] || fail "the wheel has no $f"
done
# Every library the binaries load outside the wheel is one manylinux allows.
for b in ddprun ddp-guard ddp-rendezvousd ddp-store; do
  if ldd "$prefix/bin/$b" 2>/dev/null \
     | grep -vE '=> [^ ]*/ddprun\.libs/|^\s*lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+)\.so\.[0-9]+ => /' | grep -E '=>'; then
    fail "$b loads the libraries above from outside the wheel"
  fi
done
# The plugins ddprun loads for --numa_binding (hwloc) and an https etcd
# (OpenSSL): in the wheel, their libraries bundled too, and loadable.
for p in libddp_numa.so libddp_etcd_tls.so; do
  [[ -f $prefix/lib/ddprun/$p ]] || fail "the wheel has no lib/ddprun/$p"
  if ldd "$prefix/lib/ddprun/$p" 2>/dev/null \
     | grep -vE '/ddprun\.libs/|lib(c|m|dl|rt|pthread|gcc_s|stdc\+\+)\.so|ld-linux|linux-vdso' | grep -E '=>'; then
    fail "lib/ddprun/$p loads the libraries above from outside the wheel"
  fi
done
(cd "$stage" && "$venv/bin/ddprun" --standalone --numa_binding=node --no_python /bin/true >/dev/null 2>&1) \
  || fail "ddprun --numa_binding=node from the wheel"
"$venv/bin/ddp-store" --help > /dev/null || fail "ddp-store --help"
"$venv/bin/ddp-rendezvousd" --help > /dev/null || fail "ddp-rendezvousd --help"

# Outside ddprun: a no-op, one warning however often it is called. Cheap to
# import: it loads four small standard modules besides itself (never torch,
# typing, contextlib, warnings), which -X importtime below puts in figures.
warn=$(cd "$stage" && "$venv/bin/python" -W default -c '
import sys
before = set(sys.modules)
from ddprun import liveness
loaded = set(sys.modules) - before - {"ddprun", "ddprun.liveness"}
assert loaded <= {"mmap", "struct", "_struct", "time"}, sorted(loaded)
liveness.heartbeat(); liveness.heartbeat()
with liveness.section("step"): pass
assert not liveness.enabled()' 2>&1) || fail "ddprun.liveness outside ddprun: $warn"
[[ $(grep -c 'ddprun.liveness does nothing: DDP_LIVENESS_FILE is not set' <<<"$warn") == 1 ]] \
  || fail "expected one warning outside ddprun, got: $warn"
"$venv/bin/python" -X importtime -c 'import ddprun.liveness' 2>&1 \
  | awk -F'|' '/ ddprun.liveness$/ { print "import ddprun.liveness: " $2 + 0 " us" }'

# A DDP job, with the venv's python though PATH has no venv (the default
# interpreter is the console script's).
cp "$here/train_ddp.py" "$stage/"
cd "$stage"
out1=$(PATH=/usr/bin:/bin "$venv/bin/ddprun" --standalone --nproc_per_node=2 --section_timeouts data=60 \
       train_ddp.py 2>&1) || { code=$?; echo "$out1"; fail "ddprun exited $code"; }
for r in 0 1; do
  grep -q "trained rank=$r world_size=2 same_weights=True liveness=on python=$venv/bin/python" <<<"$out1" \
    || { echo "$out1"; fail "rank $r did not train with liveness on under $venv/bin/python"; }
done
grep -q "ddp-guard not found" <<<"$out1" && { echo "$out1"; fail "ddprun did not find the wheel's ddp-guard"; }
echo "ok: 2-rank DDP job under the pip-installed ddprun"

# A hung rank, caught by its section timeout; forked by the --preload zygote
# and its stack taken through the stack hook, both found inside the wheel.
set +e
out2=$(HANG_RANK=1 "$venv/bin/python" -m ddprun --standalone --nproc_per_node=2 --section_timeouts data=3 \
       --preload torch train_ddp.py 2>&1)
code=$?
set -e
[[ $code == 1 ]] || { echo "$out2"; fail "hung rank: ddprun exited $code, expected 1"; }
grep -q "worker hung rank=1 local_rank=1" <<<"$out2" || { echo "$out2"; fail "rank 1 not reported hung"; }
grep -q "section 'data' expired" <<<"$out2" || { echo "$out2"; fail "no expired section 'data'"; }
[[ $(grep -c "worker hung" <<<"$out2") == 1 ]] || { echo "$out2"; fail "more than one rank reported hung"; }
grep -qE "^ +train_ddp.py:[0-9]+ in main$" <<<"$out2" || { echo "$out2"; fail "no Python stack of the hung rank"; }
grep -qF "$prefix/share/ddprun/ddp_zygote.py:" <<<"$out2" || { echo "$out2"; fail "the hung rank was not forked by the wheel's zygote"; }
echo "ok: the hung rank was caught"

# A broken install: one line naming the missing file and how to reinstall
# (from the wheel it was installed from), exit 2, before anything starts.
# ddprun needs ddp-guard and the zygote too: without them it would run
# unguarded, or take the ones of a source install under /usr/local.
broken() {  # FILE COMMAND...: with FILE of the prefix moved away
  mv "$prefix/$1" "$stage/moved"
  set +e
  err=$("${@:2}" --help 2>&1 >/dev/null)
  code=$?
  set -e
  mv "$stage/moved" "$prefix/$1"
  [[ $code == 2 && $(wc -l <<<"$err") == 1 && $err == *"$prefix/$1 is missing (a broken install)"* \
     && $err == *"reinstall with: $venv/bin/python"*" -m pip install --force-reinstall $wheel" ]] \
    || fail "${*:2} with $1 missing: exit $code, said: $err"
}
broken bin/ddprun "$venv/bin/ddprun"
broken bin/ddprun "$venv/bin/python" -m ddprun
broken bin/ddp-guard "$venv/bin/ddprun"
broken share/ddprun/ddp_zygote.py "$venv/bin/python" -m ddprun
broken bin/ddp-store "$venv/bin/ddp-store"
broken bin/ddp-rendezvousd "$venv/bin/ddp-rendezvousd"
echo "ok: a missing file is one line: $err"
uninstall "$venv"

# --- venv 2: nothing else installed; a C++ project against the installed SDK --
venv2=$stage/venv2
new_venv "$venv2"
install "$venv2"
prefix2=$("$venv2/bin/python" -m ddprun --cmake-prefix)
# Nothing but the wheel in this venv (no torch, no Debian packages): Python
# workers still get the venv's python and a working ddprun.liveness.
cat > "$stage/beat.py" <<'PY'
import os, sys
from ddprun import liveness
with liveness.section("step"):
    liveness.heartbeat()
print(f"beat rank={os.environ['RANK']} liveness={'on' if liveness.enabled() else 'off'} python={sys.executable}")
PY
out4=$(cd "$stage" && PATH=/usr/bin:/bin "$venv2/bin/ddprun" --standalone --nproc_per_node=2 beat.py 2>&1) \
  || { code=$?; echo "$out4"; fail "ddprun in the bare venv: exit $code"; }
for r in 0 1; do
  grep -q "beat rank=$r liveness=on python=$venv2/bin/python" <<<"$out4" \
    || { echo "$out4"; fail "rank $r in the bare venv"; }
done
echo "ok: Python workers in a venv with nothing but the wheel: its python, liveness on"
"$cmake" -S "$consumer" -B "$stage/consumer-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix2" -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF > "$stage/configure.log" 2>&1 \
  || { cat "$stage/configure.log"; fail "configure the find_package(ddp) consumer"; }
grep -q "ddp_DIR:PATH=$prefix2/lib/cmake/ddp" "$stage/consumer-build/CMakeCache.txt" \
  || fail "find_package(ddp) did not find the wheel's package: $(grep ddp_DIR "$stage/consumer-build/CMakeCache.txt")"
"$cmake" --build "$stage/consumer-build" > "$stage/build.log" 2>&1 || { cat "$stage/build.log"; fail "build the consumer"; }
out3=$("$venv2/bin/ddprun" --standalone --nproc_per_node=2 "$stage/consumer-build/ddp_consumer" 2>&1) \
  || { code=$?; echo "$out3"; fail "ddprun ran the consumer: exit $code"; }
for r in 0 1; do
  grep -q "consumer rank=$r world_size=2 sum=3" <<<"$out3" || { echo "$out3"; fail "consumer rank $r"; }
done
echo "ok: a find_package(ddp) program built against the wheel's SDK ran on 2 ranks"
uninstall "$venv2"
echo "ok: pip uninstall left both venvs as they were"
