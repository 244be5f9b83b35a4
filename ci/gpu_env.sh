# Source me on the GPU host (no package index): unpack the offline bundles made by
# ../shared/gpu-host/pack into /tmp/site and put every wheel's src/ tree on PYTHONPATH.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
if [ -d "$_root/.gpu-host" ] && [ ! -f /tmp/site/.unpacked ]; then
  mkdir -p /tmp/site
  for b in "$_root"/.gpu-host/*.tar.xz; do tar xJf "$b" -C /tmp/site; done
  touch /tmp/site/.unpacked
fi
_src=""
for d in "$_root"/packages/*/src; do _src="$_src:$d"; done
export PYTHONPATH="${_src#:}:$_root/shared:$_root/benchmarks:/tmp/site:/tmp/site/nvidia_cutlass_dsl/dsl_packages${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONUNBUFFERED=1
