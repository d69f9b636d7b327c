#!/usr/bin/env bash
# Runs command lines inside a qemu VM that boots Debian's kernel with soft-RoCE (rdma_rxe)
# on a veth pair, and hands their output and exit status back to the host.
#
#   ci/rxe-vm/run.sh [-b BINARY]... [-t SECONDS] [-T SECONDS] [-m MiB] [-k] -- 'CMD' ['CMD'...]
#
#   -b BINARY   ship BINARY into the guest's /bin, with its ldd closure (repeatable)
#   -t SECONDS  timeout of each command inside the guest (default 120)
#   -T SECONDS  host-side timeout of the whole VM (default: sum of the command timeouts + 60)
#   -m MiB      guest memory (default 1024)
#   -s N        virtual CPUs (default 4: with 2, two busy-polling processes starve
#               rxe's kernel work and latencies jump to the 4 ms scheduler tick)
#   -k          keep the work directory (initramfs, console log) and print its path
#   RXE_VM_APPEND (environment): more kernel command-line arguments
#
# Each command runs in order under `timeout` in /bin/sh with RDMA device rxe0 ACTIVE
# (10.99.0.1 on veth v0); its output goes to the serial console between the lines
# `@@CMD <i> <cmd>@@` and `@@RC <i>=<rc>@@`. The guest ends with `@@EXIT=<rc>@@` (the
# first nonzero rc, else 0) and powers off. The host prints the guest's output and exits
# with that rc; a missing marker (timeout, panic, out of memory) exits 124 (timed out)
# or 125.
#
# Facts this relies on (measured here: shared/design/rxe-vm.md): TCG only (KVM guests hang
# on this machine), the module order crc32_generic .. rdma_rxe, veth, iproute2's /bin/ip
# (busybox's applet cannot make veth pairs), the rxe provider and its driver file, which
# ldd cannot see.
set -euo pipefail

bins=()
cmd_timeout=120
vm_timeout=
mem=1024
smp=4
keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    -b) bins+=("$2"); shift 2 ;;
    -t) cmd_timeout="$2"; shift 2 ;;
    -T) vm_timeout="$2"; shift 2 ;;
    -m) mem="$2"; shift 2 ;;
    -s) smp="$2"; shift 2 ;;
    -k) keep=1; shift ;;
    --) shift; break ;;
    -*) echo "rxe-vm: unknown option $1" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "usage: $0 [-b BINARY]... [-t SECONDS] [-T SECONDS] [-m MiB] [-k] -- 'CMD'..." >&2
  exit 2
fi
[ -n "$vm_timeout" ] || vm_timeout=$(( $# * cmd_timeout + 60 ))

kver=$(ls /lib/modules | sort -V | tail -1)
kernel=/boot/vmlinuz-$kver
for f in "$kernel" /bin/busybox /usr/bin/qemu-system-x86_64; do
  if [ ! -e "$f" ]; then
    echo "rxe-vm: $f is missing (apt-get install qemu-system-x86 linux-image-amd64 busybox-static)" >&2
    exit 2
  fi
done

work=$(mktemp -d /tmp/rxe-vm.XXXXXX)
cleanup() { if [ "$keep" = 1 ]; then echo "rxe-vm: kept $work" >&2; else rm -rf "$work"; fi; }
trap cleanup EXIT
root=$work/root
mkdir -p "$root"/{bin,sbin,etc,proc,sys,dev,tmp,run,lib/modules,root,usr/bin,usr/sbin}
chmod 1777 "$root/tmp"

# --- files: a binary and every library it loads ---------------------------------------
ship_lib() { # copies a file to the same path in the image (following links)
  local f=$1
  [ -e "$root$f" ] && return 0
  mkdir -p "$root$(dirname "$f")"
  cp -L "$f" "$root$f"
}
ship_closure() {
  local f=$1 lib
  for lib in $(ldd "$f" 2>/dev/null | grep -o '/[^ ]*' | sort -u); do
    [ -e "$lib" ] && ship_lib "$lib"
  done
}
ship_bin() { # ship_bin SRC [DEST-dir]
  local src=$1 dst=${2:-/bin}
  cp -L "$src" "$root$dst/$(basename "$src")"
  ship_closure "$src"
}

cp /bin/busybox "$root/bin/busybox"
ship_closure /bin/busybox # nothing for busybox-static; the libraries of a dynamic one
for applet in $(/bin/busybox --list); do
  [ -e "$root/bin/$applet" ] || ln -s busybox "$root/bin/$applet"
done
# iproute2 (veth), rdma (link add), the reference tools.
rm -f "$root/bin/ip"
ship_bin /bin/ip /bin
for t in rdma ibv_devinfo ib_write_lat ib_read_lat ib_atomic_lat ib_write_bw; do
  p=$(command -v "$t" || true)
  if [ -n "$p" ]; then ship_bin "$p" /usr/bin; else echo "rxe-vm: $t not found, not shipped" >&2; fi
done
# The rxe provider: dlopened by libibverbs, invisible to ldd.
for f in /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so /etc/libibverbs.d/rxe.driver; do
  [ -e "$f" ] && ship_lib "$f" && ship_closure "$f"
done
for b in "${bins[@]}"; do ship_bin "$b" /bin; done
# The dynamic loader at its canonical path.
ship_lib /lib64/ld-linux-x86-64.so.2

# --- kernel modules --------------------------------------------------------------------
mods="crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs configfs ib_cm iw_cm rdma_cm rdma_ucm rdma_rxe veth"
modlist=
for m in $mods; do
  f=$(find "/lib/modules/$kver/kernel" -name "$m.ko" -o -name "$m.ko.xz" -o -name "$m.ko.zst" | head -1)
  if [ -z "$f" ]; then
    # Built into the kernel (or absent): nothing to load.
    continue
  fi
  case "$f" in
    *.xz) xz -dc "$f" > "$root/lib/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$root/lib/modules/$m.ko" ;;
    *) cp "$f" "$root/lib/modules/$m.ko" ;;
  esac
  modlist="$modlist $m"
done

# --- guest configuration -----------------------------------------------------------------
echo "rxevm" > "$root/etc/hostname"
printf '127.0.0.1 localhost\n10.99.0.1 rxevm\n' > "$root/etc/hosts"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$root/etc/passwd"
printf 'root:x:0:\n' > "$root/etc/group"

{
  echo "#!/bin/sh"
  echo "cmd_timeout=$cmd_timeout"
  echo "modlist=\"$modlist\""
  echo "ncmds=$#"
  i=0
  for c in "$@"; do
    i=$((i + 1))
    printf 'cmd%d=%q\n' "$i" "$c"
  done
} > "$root/cmds"

cat > "$root/init" <<'EOF'
#!/bin/sh
export PATH=/bin:/sbin:/usr/bin:/usr/sbin HOME=/root TMPDIR=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mkdir -p /dev/shm /dev/pts
mount -t tmpfs shm /dev/shm
hostname rxevm
. /cmds
finish() {
  echo "@@EXIT=$1@@"
  sync
  poweroff -f
  sleep 5
}
for m in $modlist; do
  insmod /lib/modules/$m.ko || { echo "rxe-vm: insmod $m failed"; finish 125; }
done
/bin/ip link set lo up
/bin/ip link add v0 type veth peer name v1
/bin/ip addr add 10.99.0.1/24 dev v0
/bin/ip link set v0 up
/bin/ip link set v1 up
rdma link add rxe0 type rxe netdev v0 || { echo "rxe-vm: rdma link add failed"; finish 125; }
n=0
while [ "$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)" != "4: ACTIVE" ]; do
  n=$((n + 1))
  if [ $n -gt 200 ]; then echo "rxe-vm: rxe0 never became ACTIVE"; finish 125; fi
  sleep 0.1
done
ulimit -l unlimited 2>/dev/null
cd /tmp
rc=0
i=1
while [ $i -le $ncmds ]; do
  eval "c=\$cmd$i"
  echo; echo "@@CMD $i $c@@"
  timeout "$cmd_timeout" sh -c "$c" < /dev/null 2>&1
  r=$?
  echo "@@RC $i=$r@@"
  [ $rc -eq 0 ] && [ $r -ne 0 ] && rc=$r
  i=$((i + 1))
done
finish $rc
EOF
chmod +x "$root/init"

(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) > "$work/initrd.gz"

log=$work/console.log
set +e
timeout --foreground -k 5 "$vm_timeout" qemu-system-x86_64 \
  -accel tcg,thread=multi -cpu max -m "$mem" -smp "$smp" \
  -nographic -no-reboot -nic none -monitor none -serial stdio \
  -kernel "$kernel" -initrd "$work/initrd.gz" \
  -append "console=ttyS0 quiet panic=-1 oops=panic loglevel=3 tsc=reliable ${RXE_VM_APPEND:-}" < /dev/null > "$log" 2>&1
qrc=$?
set -e
tr -d '\r' < "$log" > "$log.txt"
# The guest's output, without the kernel's boot chatter before the first command.
sed -n '/@@CMD /,$p' "$log.txt" | sed 's/^.*@@CMD /@@CMD /'
rc=$(grep -o '^@@EXIT=[0-9]*@@' "$log.txt" | tail -1 | tr -dc 0-9)
if [ -z "$rc" ]; then
  echo "rxe-vm: no exit marker (qemu rc $qrc); last console lines:" >&2
  tail -30 "$log.txt" >&2
  [ "$qrc" = 124 ] && exit 124
  exit 125
fi
exit "$rc"
