#!/usr/bin/env bash
# Installs the Debian packages PipeStudio needs to build, test and run.
# Idempotent: only missing packages are installed, and `apt-get update` runs only when
# something is missing. The CUDA toolkit (/usr/local/cuda) is not a Debian package here;
# the build detects it and skips the CUDA parts when it is absent.
set -euo pipefail

packages=(
  # toolchain; clang-format and clang-tidy 14 for `make format-check` and `make tidy` (CI runs both;
  # the formatting is that of version 14)
  build-essential cmake ninja-build pkg-config git clang-format clang-format-14 clang-tidy clang-tidy-14
  # core libraries
  nlohmann-json3-dev libcli11-dev libsqlite3-dev sqlite3 libssh-dev coinor-libcbc-dev
  # trace import: gzip (Kineto .json.gz) and PCRE2 (--op-pattern)
  zlib1g-dev libpcre2-dev
  # tests and benchmarks
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  # Qt 6 and QCustomPlot (Qt 6 build ships as libqcustomplot2.1-qt6)
  qt6-base-dev qt6-base-dev-tools qt6-svg-dev libqt6svg6 libqt6test6 libqcustomplot-dev
  libgl-dev libxkbcommon-dev
  # real sshd for the remote tests, Xvfb for the real-display smoke test
  openssh-server openssh-client xvfb xauth
  # launcher slurm|mpirun: a real single-node Slurm (the tests start private daemons, nothing
  # system-wide) and Open MPI's mpirun for the remote tests; srun/squeue/scancel on login nodes
  slurmctld slurmd slurm-client munge openmpi-bin
  # fonts so offscreen screenshots render text
  fonts-dejavu-core
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi
echo "install-deps: installing ${#missing[@]} missing package(s): ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: installed ${missing[*]}"
