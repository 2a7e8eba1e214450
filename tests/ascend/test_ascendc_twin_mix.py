"""The twin's mixed launches (one AIC + two AIVs per AI core): every rule ASCENDC_CUBE.md lists
for the cube unit, cross-core sync, atomics and GM workspaces fires on a deliberately broken
snippet, and the clean snippets (Matmul; flags of modes 1 and 2, SyncAll, zeroing + atomic
adds) pass and compute the right values under any scheduling order."""
from __future__ import annotations

import pytest
from ascendc_harness import twin_lib as twin

# Each broken snippet in harness_mix.cpp with the rule it must trip.
EXPECTED_RULES = {
    "atomic_add_unzeroed": "never written (zero the target first)",
    "atomic_after_zeroing_without_barrier": "races with the plain write",
    "atomic_mode_left_on": "atomic add mode still on",
    "atomic_type_mismatch": "set for another element type",
    "copy_through_without_sync": "MTE2 (GM->UB copy) -> MTE3",
    "crosscore_flag_from_pipe_s": "modes 0..2 are set from PIPE_V",
    "flag_collides_with_syncall": "owns flag ids 11..14",
    "matmul_l0c_2201": "/ L0C 131072",
    "mix_ub_reserved": "the Matmul keeps the end of UB",
    "flag_collides_with_matmul": "belong to the",
    "flag_counter_overflow": "would exceed 15",
    "flag_id_out_of_range": "flag ids are 0..15",
    "flag_never_waited": "never waited before the kernel ended",
    "matmul_base_not_fractal": "is not whole 16 x 16 fractals",
    "matmul_beyond_single_shape": "outside the tiling's singleCore shape",
    "matmul_l0_overflow": "exceed L0A",
    "matmul_on_aic": "called on the AIC: in a mixed kernel",
    "matmul_reads_unwritten": "that nobody wrote",
    "matmul_tiling_step_unset": "must be > 0",
    "matmul_transpose_undeclared": "declared without ISTRANS",
    "matmul_without_end": "Matmul requests or Matmul::End()",
    "mode2_set_by_one_aiv": "set by only AIV",
    "plain_write_race": "with no atomics and no flag or SyncAll ordering them",
    "read_unwritten_workspace": "that nobody wrote",
    "read_without_flag": "with no cross-core flag or SyncAll ordering them",
    "regist_after_initbuffer": "REGIST_MATMUL_OBJ after TPipe::InitBuffer",
    "syncall_skipped_by_one_core": "SyncAll<true>() (not every core arrived)",
    "too_many_matmuls": "Matmul objects on",
    "vector_api_on_aic": "called on the AIC (cube core)",
    "wait_without_set": "deadlock",
    "write_input": "writes the input buffer",
}
CLEAN = ("clean_matmul", "clean_sync")


def test_snippet_list_matches() -> None:
    assert sorted(twin.mix_snippet_names()) == sorted([*EXPECTED_RULES, *CLEAN])


@pytest.mark.parametrize("name", sorted(EXPECTED_RULES))
def test_rule_fires(name: str) -> None:
    status, declared, message = twin.run_mix_snippet(name)
    assert status == 1, f"{name}: expected a twin rule violation, got status {status}: {message}"
    assert declared == EXPECTED_RULES[name]
    assert "Ascend C rule violated" in message, message
    assert EXPECTED_RULES[name] in message, message


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 12345])
@pytest.mark.parametrize("name", CLEAN)
def test_clean_snippet_passes_in_any_order(name: str, seed: int) -> None:
    status, _, message = twin.run_mix_snippet(name, seed)
    assert status == 0, message


def test_deadlock_names_every_waiting_core() -> None:
    _, _, message = twin.run_mix_snippet("wait_without_set")
    for aiv in range(4):
        assert f"AIV {aiv} waits for CrossCoreWaitFlag(8)" in message, message


def test_cube_capacity_follows_the_arch() -> None:
    # A 256 x 256 float32 accumulator (256 KiB) fits Ascend 950's L0C, not Atlas A2/A3's 128 KiB.
    assert twin.run_mix_snippet("matmul_l0c_2201", arch=twin.ARCH_A2)[0] == 1
    status, _, message = twin.run_mix_snippet("matmul_l0c_2201", arch=twin.ARCH_950)
    assert status == 0, message
