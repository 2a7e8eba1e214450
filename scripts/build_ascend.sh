#!/usr/bin/env bash
# Builds the Ascend C custom op package of ms_grad_ops (every op of ms_grad_ops/_specs.py with
# Ascend dtypes: the ops with a generated ascendc/<op>/op_host/<op>_def.h) and installs it into
# ms_grad_ops/vendors/<vendor>/, which ms_grad_ops/__init__.py puts on ASCEND_CUSTOM_OPP_PATH at import.
#
# Needs the CANN toolkit: ASCEND_HOME_PATH must point at it (e.g. after
#   source /usr/local/Ascend/ascend-toolkit/set_env.sh
# ). Without CANN the script prints one line on stderr and exits with code 2; nothing is faked.
#
# Flow (the CANN custom-op project flow, as msopgen and MindSpore's custom_compiler use it):
#   1. stage   ascendc/<op>/op_host/<op>.cpp and its generated OpDef <op>_def.h,
#              ascendc/<op>/op_kernel/*.cpp and every header they include (ascendc/common,
#              ascendc/<op>/<op>_tiling.h, infer_shape/*.h) into two
#              flat directories, rewriting the repository-relative #includes to flat names
#              (CANN compiles op_host/ and op_kernel/ as flat directories);
#   2. project copy the CANN Ascend C op project template
#              ($ASCEND_HOME_PATH/tools/op_project_templates/ascendc/customize, or the msopgen
#              sample project), drop its example sources, add ours, and set CMakePresets.json:
#              ASCEND_CANN_PACKAGE_PATH, ASCEND_COMPUTE_UNIT (SoCs), vendor_name;
#   3. build   `bash build.sh` in the project -> build_out/custom_opp_<os>_<arch>.run;
#   4. install `custom_opp_*.run --install-path=ms_grad_ops` -> ms_grad_ops/vendors/<vendor>/.
# Equivalent MindSpore route for steps 2-4, given the staged directories of step 1:
#   python <mindspore>/lib/plugin/ascend/custom_compiler/setup.py -o <stage>/op_host \
#     -k <stage>/op_kernel --soc_version "ascend910b;ascend910_93;ascend950" \
#     --vendor_name ms_grad_ops --install_path <repo>/ms_grad_ops
#
# Usage: scripts/build_ascend.sh [--stage-only DIR] [--help]
#   --stage-only DIR  run step 1 only, into DIR (no CANN needed; used by the tests)
# Environment: MGO_SOC_VERSIONS (default "ascend910b;ascend910_93;ascend950"),
#              MGO_VENDOR (default ms_grad_ops), MGO_BUILD_DIR (default <repo>/build/ascend),
#              PYTHON (default python3; edits CMakePresets.json).
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Every op the table registers for Ascend: scripts/gen_glue.py writes an OpDef for each.
OPS=()
for def in "$REPO"/ascendc/*/op_host/*_def.h; do
  OPS+=("$(basename "$def" _def.h)")
done
SOCS="${MGO_SOC_VERSIONS:-ascend910b;ascend910_93;ascend950}"
VENDOR="${MGO_VENDOR:-ms_grad_ops}"
BUILD_DIR="${MGO_BUILD_DIR:-$REPO/build/ascend}"
PYTHON="${PYTHON:-python3}"

usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }

no_cann() {
  echo "build_ascend.sh: $1: the Ascend custom op package needs the CANN toolkit (set ASCEND_HOME_PATH, e.g. source <cann>/set_env.sh); nothing was built" >&2
  exit 2
}

# Step 1. Copies `files` into `dest` and rewrites #include "../x/y.h" to #include "y.h".
stage_flat() {
  local dest="$1"
  shift
  mkdir -p "$dest"
  local f
  for f in "$@"; do
    cp "$f" "$dest/"
    sed -i -E 's@^(#include ")(\.\./)+([A-Za-z_]+/)*([A-Za-z0-9_.]+")@\1\4@' "$dest/$(basename "$f")"
  done
}

stage() {
  local dest="$1" op
  # Every shared header (the op_host glue only to op_host/): a new one cannot be forgotten.
  # The kernels see the table's device-safe part only (attribute enums and structs, Ascend size limits).
  local host=("$REPO"/ascendc/common/*.h "$REPO"/infer_shape/*.h) kernel=("$REPO/infer_shape/op_attrs.h") f
  for f in "$REPO"/ascendc/common/*.h; do
    [[ "$(basename "$f")" == op_host_* ]] || kernel+=("$f")
  done
  for op in "${OPS[@]}"; do
    host+=("$REPO/ascendc/$op/op_host/$op.cpp" "$REPO/ascendc/$op/op_host/${op}_def.h" "$REPO/ascendc/$op/${op}_tiling.h")
    kernel+=("$REPO/ascendc/$op/op_kernel/$op.cpp" "$REPO/ascendc/$op/${op}_tiling.h")
  done
  rm -rf "$dest/op_host" "$dest/op_kernel"
  stage_flat "$dest/op_host" "${host[@]}"
  stage_flat "$dest/op_kernel" "${kernel[@]}"
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --stage-only)
    [[ $# -eq 2 ]] || { echo "build_ascend.sh: --stage-only needs a directory" >&2; exit 1; }
    stage "$2"
    echo "staged op_host/ and op_kernel/ into $2"
    exit 0 ;;
  "") ;;
  *) echo "build_ascend.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
esac

# ---- CANN is required from here on.
[[ -n "${ASCEND_HOME_PATH:-}" ]] || no_cann "ASCEND_HOME_PATH is not set"
[[ -d "$ASCEND_HOME_PATH" ]] || no_cann "ASCEND_HOME_PATH=$ASCEND_HOME_PATH is not a directory"
TEMPLATE="$ASCEND_HOME_PATH/tools/op_project_templates/ascendc"
SAMPLE="$ASCEND_HOME_PATH/tools/msopgen/template/operator_demo_projects/ascendc_operator_sample"
if [[ ! -d "$TEMPLATE/customize" && ! -d "$SAMPLE" ]]; then
  no_cann "ASCEND_HOME_PATH=$ASCEND_HOME_PATH has no Ascend C op project template (is it a CANN toolkit?)"
fi
for env_script in "$ASCEND_HOME_PATH/bin/setenv.bash" "$ASCEND_HOME_PATH/set_env.sh"; do
  # shellcheck disable=SC1090
  [[ -f "$env_script" ]] && { source "$env_script" >/dev/null 2>&1 || true; break; }
done

echo "== 1. staging sources into $BUILD_DIR"
stage "$BUILD_DIR"

echo "== 2. creating the op project from the CANN template"
PROJECT="$BUILD_DIR/project"
rm -rf "$PROJECT"
if [[ -d "$TEMPLATE/customize" ]]; then
  cp -r "$TEMPLATE/customize" "$PROJECT"
  [[ -d "$TEMPLATE/common" ]] && cp "$TEMPLATE"/common/* "$PROJECT/cmake/util/" 2>/dev/null || true
else
  cp -r "$SAMPLE" "$PROJECT"
fi
chmod -R u+w "$PROJECT"
find "$PROJECT/op_host" "$PROJECT/op_kernel" -maxdepth 1 -type f \( -name '*.cpp' -o -name '*.h' \) -delete
cp "$BUILD_DIR"/op_host/* "$PROJECT/op_host/"
cp "$BUILD_DIR"/op_kernel/* "$PROJECT/op_kernel/"
"$PYTHON" - "$PROJECT/CMakePresets.json" "$ASCEND_HOME_PATH" "$SOCS" "$VENDOR" <<'PY'
import json, sys
path, cann, socs, vendor = sys.argv[1:]
with open(path, encoding="utf-8") as f:
    presets = json.load(f)
variables = presets["configurePresets"][0]["cacheVariables"]
variables["ASCEND_CANN_PACKAGE_PATH"]["value"] = cann
variables["ASCEND_COMPUTE_UNIT"]["value"] = socs
variables["vendor_name"]["value"] = vendor
with open(path, "w", encoding="utf-8") as f:
    json.dump(presets, f, indent=4)
PY

echo "== 3. building (SoCs: $SOCS, vendor: $VENDOR)"
(cd "$PROJECT" && unset ASCEND_CUSTOM_OPP_PATH && bash build.sh)
shopt -s nullglob
RUNS=("$PROJECT"/build_out/custom_opp_*.run)
[[ ${#RUNS[@]} -eq 1 ]] || { echo "build_ascend.sh: expected one custom_opp_*.run in $PROJECT/build_out" >&2; exit 1; }

echo "== 4. installing into $REPO/ms_grad_ops/vendors/$VENDOR"
rm -rf "$REPO/ms_grad_ops/vendors/$VENDOR"
bash "${RUNS[0]}" --quiet --install-path="$REPO/ms_grad_ops"
[[ -d "$REPO/ms_grad_ops/vendors/$VENDOR" ]] || {
  echo "build_ascend.sh: the package did not install into $REPO/ms_grad_ops/vendors/$VENDOR" >&2
  exit 1
}
echo "installed: ms_grad_ops/vendors/$VENDOR (ms_grad_ops adds it to ASCEND_CUSTOM_OPP_PATH on import)"
