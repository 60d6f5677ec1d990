#!/usr/bin/env bash
# Builds the dispatch-k8s step image from this checkout, and prints its tag on stdout.
#
#   images/build.sh [--base IMAGE] [--tag TAG] [-- DOCKER-BUILD-ARGS...]
#
# The dependencies enter the image as a wheelhouse made here, on the host, so `docker build`
# itself needs no package index: wheels for the image's Python (3.11 on glibc, this machine's
# architecture) are downloaded whatever the host's own Python is. Progress goes to stderr.
#   --base   the base image (default python:3.11-slim; any Debian-like image with Python 3.11)
#   --tag    the image tag (default dispatch-k8s:<version in pyproject.toml>)
#   after -- extra `docker build` arguments, e.g. `--network host` on an engine without a bridge
# Env: PYTHON (default python3) runs pip; PIP_* settings (index, proxy) apply as usual.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$repo/pyproject.toml" | head -n 1)
base=python:3.11-slim
tag=dispatch-k8s:$version
python=${PYTHON:-python3}
while (($#)); do
  case $1 in
    --base) base=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done

context=$(mktemp -d "${TMPDIR:-/tmp}/dispatch-image.XXXXXX")
trap 'rm -rf "$context"' EXIT
started=$SECONDS

# Only the package's own files are staged, so no cache or virtualenv of the work tree can
# leak into the wheel.
mkdir -p "$context/src" "$context/wheels"
cp "$repo/pyproject.toml" "$repo/README.md" "$repo/LICENSE" "$context/src/"
cp -r "$repo/bin" "$context/src/"
# The folders linked under dispatch_k8s/ are copied into it here, as the wheel has them.
mkdir -p "$context/src/dispatch_k8s"
cp "$repo/dispatch_k8s/__init__.py" "$context/src/dispatch_k8s/"
for link in "$repo"/dispatch_k8s/*; do
  [[ -L $link ]] || continue  # the links are the packages (not __init__.py, __pycache__)
  package=$(basename "$link")
  mkdir -p "$context/src/dispatch_k8s/$package"
  # Its Python files only, subpackages too (core/rules, core/shell), no __pycache__.
  (cd "$repo/$package" && find . -name '*.py' -exec cp --parents {} "$context/src/dispatch_k8s/$package/" \;)
done
echo "build.sh: building the dispatch-k8s $version wheel" >&2
# Fixed zip timestamps: the same sources give the same wheel, so docker's layer cache holds.
SOURCE_DATE_EPOCH=315532800 \
  "$python" -m pip wheel --quiet --no-deps --wheel-dir "$context/wheels" "$context/src" >&2

# Binary wheels only, for CPython 3.11 on manylinux (glibc <= 2.36: Debian bookworm, the
# python:3.11-slim base), so the result does not depend on the host's Python.
# pip matches only the platform tags it is given, so every glibc from 2.17 (manylinux2014) up
# to bookworm's 2.36 is listed.
arch=$(uname -m)
platforms=()
for glibc_minor in $(seq 17 36); do
  platforms+=(--platform "manylinux_2_${glibc_minor}_$arch")
done
echo "build.sh: downloading dependency wheels for CPython 3.11 on $arch" >&2
"$python" -m pip download --quiet --only-binary=:all: \
  --python-version 3.11 --implementation cp "${platforms[@]}" \
  --dest "$context/wheels" "$context/wheels"/dispatch_k8s-*.whl >&2

cp "$repo/images/Dockerfile" "$context/Dockerfile"
echo "build.sh: docker build $tag on $base" >&2
docker build --build-arg "BASE=$base" --tag "$tag" "$@" "$context" >&2
echo "build.sh: built $tag in $((SECONDS - started))s" >&2
echo "$tag"
