#!/usr/bin/env bash
# Builds the dispatch-k8s step image from this checkout, and prints its tag on stdout.
#
#   images/build.sh [--base IMAGE] [--tag TAG] [--push REGISTRY/NAME] [-- DOCKER-BUILD-ARGS...]
#
# The dependencies enter the image as a wheelhouse made here, on the host, so `docker build`
# itself needs no package index: wheels for the image's Python (3.11 on glibc, this machine's
# architecture) are downloaded whatever the host's own Python is. The image is for this
# machine's platform only (linux/amd64 on x86_64, linux/arm64 on aarch64). Progress goes to
# stderr.
#   --base   the base image (default python:3.11-slim; any Debian-like image with Python 3.11)
#   --tag    the image tag (default dispatch-k8s:<version in pyproject.toml>)
#   --push   then tag it REGISTRY/NAME:<version> and `docker push` that (after `docker login`);
#            stdout names what was pushed instead of the local tag
#   after -- extra `docker build` arguments, e.g. `--network host` on an engine without a bridge
# Env: PYTHON (default python3) runs pip; PIP_* settings (index, proxy) apply as usual.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
# pyproject.toml is the one place for the version (the tag and the version label) and the
# license (the licenses label).
project_field() { sed -n "s/^$1 = \"\(.*\)\"\$/\1/p" "$repo/pyproject.toml" | head -n 1; }
version=$(project_field version)
license=$(project_field license)
# The commit and where it came from, for the revision and source labels; a remote's URL may
# carry credentials, which are dropped.
revision=$(git -C "$repo" rev-parse HEAD 2>/dev/null) || revision=unknown
origin=$(git -C "$repo" remote get-url origin 2>/dev/null | sed 's#://[^/@]*@#://#') || true
# The SBOM generator, pinned: it runs in the build's first stage only, never in the image.
sbom_tool=cyclonedx-bom==7.5.0
base=python:3.11-slim
tag=dispatch-k8s:$version
push=
python=${PYTHON:-python3}
while (($#)); do
  case $1 in
    --base) base=$2; shift 2 ;;
    --tag) tag=$2; shift 2 ;;
    --push) push=$2; shift 2 ;;
    --) shift; break ;;
    *) echo "build.sh: unknown argument $1 (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [[ ${push##*/} == *:* ]]; then
  echo "build.sh: --push takes REGISTRY/NAME without a tag (the tag is the version, $version)" >&2
  exit 2
fi

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
# The SBOM generator's wheels apart, so they never meet the image's own; pyproject.toml gives
# the SBOM its root component (name, version, license, direct dependencies).
mkdir -p "$context/sbom-tool"
cp "$repo/pyproject.toml" "$context/sbom-tool/"
"$python" -m pip download --quiet --only-binary=:all: \
  --python-version 3.11 --implementation cp "${platforms[@]}" \
  --dest "$context/sbom-tool" "$sbom_tool" >&2

cp "$repo/images/Dockerfile" "$context/Dockerfile"
echo "build.sh: docker build $tag on $base" >&2
docker build --build-arg "BASE=$base" \
  --build-arg "VERSION=$version" --build-arg "LICENSES=$license" \
  --build-arg "REVISION=$revision" --build-arg "SOURCE=${origin:-unknown}" \
  --tag "$tag" "$@" "$context" >&2
echo "build.sh: built $tag in $((SECONDS - started))s" >&2
if [[ -n $push ]]; then
  docker tag "$tag" "$push:$version" >&2
  docker push "$push:$version" >&2
  echo "build.sh: pushed $push:$version" >&2
  tag=$push:$version
fi
echo "$tag"
