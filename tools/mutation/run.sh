#!/usr/bin/env bash
# Mutation testing (mutmut 3) of the modules where a silent bug costs most, each against its own
# fast, targeted tests. Too slow for CI: run it before resolving an issue that touches these modules
# and quote the score (see tools/mutation/MUTATION.md).
#
#   bash tools/mutation/run.sh                 # every target below
#   bash tools/mutation/run.sh sampling gem_maths   # some of them
#   MUTATION_WORK=/tmp/mut bash tools/mutation/run.sh metrics
#
# Each target runs in its own copy of the repository under $MUTATION_WORK (default /tmp/pal-mutation),
# with a [tool.mutmut] section appended to that copy's pyproject.toml only: the repository's own
# pyproject.toml carries no mutmut configuration, so plain `python -m pytest` is never affected.
# Results: $MUTATION_WORK/<target>/survivors.txt (one mutant name a line), survivors.diff (each
# surviving mutant's diff, to review) and a score line on stdout. Needs the dev and mutation extras (pip install -e ".[dev,mutation]").
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
WORK="${MUTATION_WORK:-/tmp/pal-mutation}"
JOBS="${MUTATION_JOBS:-2}"
# one thread: mutmut limits each mutant's CPU time, and idle OpenMP threads spinning would use it up
export HF_HUB_OFFLINE=1 HYPOTHESIS_PROFILE=mutation OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

# target -> "module(s) to mutate | tests that must kill the mutants"
declare -A MODULES TESTS MUTANTS
MODULES[sampling]="pal_lightning/data/sampling/schedules.py"
TESTS[sampling]="tests/data/test_schedules.py tests/tasks/test_auxiliary.py tests/data/test_options.py::test_annealing_horizon tests/data/test_task_plan.py"
MODULES[samplers]="pal_lightning/data/sampling/per_task.py pal_lightning/data/sampling/mixed.py pal_lightning/data/sampling/streams.py"
# the mixed sampler's own tests (not the file's data-module and module tests: seconds each per mutant)
MIXED_SAMPLER_TESTS=$(printf 'tests/data/test_mixed_sampler.py::%s ' \
  test_rows_draw_tasks_by_each_epochs_annealed_probabilities \
  test_ddp_shares_disjoint_and_each_task_stream_without_replacement \
  test_grouping_keeps_every_rows_task_and_cuts_the_padding test_grouping_keeps_repeats_out_of_a_global_batch \
  test_resume_gives_the_same_batches test_report_sequence_split_and_pool_size test_refusals_each_name_the_fix)
TESTS[samplers]="tests/data/test_per_task_sampler.py tests/data/test_streams.py tests/data/test_task_plan.py $MIXED_SAMPLER_TESTS"
MODULES[metrics]="pal_lightning/tasks/metrics.py"
# the Matthews metric and the GLUE branch of the overall score are checked by hand in test_glue
TESTS[metrics]="tests/tasks/test_metrics.py tests/cli/test_honest_scores.py tests/data/test_glue.py::test_matthews_by_hand tests/data/test_glue.py::test_glue_average_by_hand"
# GEM in two parts: the pure maths against its fast tests, the callback (memory, write-back) against
# the callback tests, which train tiny models (slower: several minutes on two cores)
MODULES[gem_maths]="pal_lightning/gem/qp.py pal_lightning/gem/projection.py"
MUTANTS[gem_maths]="*x_solve_gem_dual__* *x_relative_violation__* *x_solve_gem_dual_exact__* *x__keep_free_positive__* *x_gem_coefficients__* *x__solve_normalised__* *x_step_coefficients__* *x_project_gradient__* *x_agem_project__*"
TESTS[gem_maths]="tests/gem/test_projection.py tests/gem/test_qp.py"
# every function of these modules (no MUTANTS filter); mutmut runs, for each mutant, only the tests
# that call its function, fastest first, so the few Trainer.fit tests (1-2 s each) run only for the
# mutants the unit tests let through. The DDP tests (spawned processes) are not in the list: the
# rank/world-size arithmetic is checked in one process (tests/gem/test_callback.py, ranks summed by hand).
MODULES[gem_callback]="pal_lightning/gem/memory.py pal_lightning/gem/gram.py pal_lightning/gem/rows.py pal_lightning/gem/callback.py"
TESTS[gem_callback]="tests/gem/test_callback.py tests/gem/test_memory.py tests/gem/test_rows.py tests/gem/test_gram.py tests/module/test_guard.py::test_fp16_training_with_gem_projects_and_stays_finite tests/module/test_simcse_step.py::test_gem_memories_use_the_task_loss_without_simcse tests/module/test_sharing_module.py::test_gem_shared_parameters_are_the_embeddings_and_the_s_layers"
# A-GEM's sparse embedding-table gradients (c5cf636): the functions that commit added or changed only
MODULES[gem_sparse]="pal_lightning/gem/rows.py pal_lightning/gem/gram.py"
MUTANTS[gem_sparse]="*x__compiling__* *x_sparse_embedding_gradients__* *x__dot__* *x_add_rows__* *x_memory_gradient__* *x_constraint_gradients__*"
TESTS[gem_sparse]="tests/gem/test_rows.py tests/gem/test_gram.py tests/gem/test_callback.py"
MODULES[rng_state]="pal_lightning/callbacks/rng_state.py"
TESTS[rng_state]="tests/callbacks/test_rng_state.py"
MODULES[pal]="pal_lightning/modeling/methods/pals.py pal_lightning/modeling/methods/where.py pal_lightning/modeling/encoder.py pal_lightning/modeling/families/build.py pal_lightning/modeling/families/routed.py pal_lightning/modeling/families/wiring.py pal_lightning/modeling/families/routing.py pal_lightning/modeling/encoder_state.py pal_lightning/modeling/families/prefix.py pal_lightning/modeling/methods/batched.py"
TESTS[pal]="tests/modeling/test_pal.py tests/modeling/test_pal_reference.py tests/modeling/test_pal_ops.py tests/modeling/test_encoder.py tests/modeling/test_encoder_state.py tests/modeling/test_variants.py tests/modeling/test_sharing.py tests/modeling/test_adapter_config.py tests/modeling/test_mixed_routing.py tests/modeling/test_conformance.py tests/modeling/test_shared_prefix.py tests/modeling/test_batched_rows.py tests/modeling/test_families.py::test_a_pal_term_joins_where_the_design_puts_it_on_every_family"
# the variants on top and the layer-sharing regimes (parsing, groups), against their own tests
MODULES[pal_variants]="pal_lightning/modeling/methods/on_top.py pal_lightning/modeling/sharing.py"
TESTS[pal_variants]="tests/modeling/test_variants.py tests/modeling/test_conformance.py tests/modeling/test_sharing.py tests/modeling/test_encoder.py tests/modeling/test_pal_reference.py"
MODULES[score_report]="pal_lightning/callbacks/score_report.py"
# the hooks with stand-in trainers (no training); test_honest_scores adds one real partial fit through the CLI
TESTS[score_report]="tests/callbacks/test_score_report.py tests/cli/test_honest_scores.py"
ORDER=(sampling metrics gem_maths samplers rng_state gem_callback gem_sparse pal pal_variants score_report)

targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=("${ORDER[@]}")

toml_list() { # words -> TOML list of strings
  local out="" w
  for w in "$@"; do out+="\"$w\", "; done
  echo "[${out%, }]"
}

for t in "${targets[@]}"; do
  [ -n "${MODULES[$t]:-}" ] || { echo "unknown target $t (choose from ${ORDER[*]})" >&2; exit 2; }
  dir="$WORK/$t"
  rm -rf "$dir" && mkdir -p "$dir"
  # configs and docs: tests read the shipped configs and the docs' blocks (also_copy puts them beside the mutants)
  cp -r "$ROOT/pal_lightning" "$ROOT/tests" "$ROOT/configs" "$ROOT/docs" "$ROOT/pyproject.toml" "$dir/"
  find "$dir" -name __pycache__ -prune -exec rm -rf {} +
  # shellcheck disable=SC2086
  existing=$(cd "$dir" && for x in ${TESTS[$t]}; do [ ! -e "${x%%::*}" ] || echo "$x"; done) # file or file::test
  cat >>"$dir/pyproject.toml" <<TOML

[tool.mutmut]
source_paths = ["pal_lightning"]
only_mutate = $(toml_list ${MODULES[$t]})
pytest_add_cli_args_test_selection = $(toml_list $existing)
pytest_add_cli_args = ["-p", "no:cacheprovider", "-x", "-q"]
also_copy = ["configs", "docs"]
TOML
  echo "== $t: mutating ${MODULES[$t]} against: $existing"
  # shellcheck disable=SC2086
  (cd "$dir" && mutmut run --max-children "$JOBS" ${MUTANTS[$t]:-} >"$dir/run.log" 2>&1) || {
    echo "mutmut failed for $t, see $dir/run.log" >&2
    tail -20 "$dir/run.log" >&2
    continue
  }
  (cd "$dir" && mutmut results --all true >"$dir/results.txt" 2>&1 || true)
  grep -E ': (survived|no tests|timeout|suspicious)' "$dir/results.txt" >"$dir/survivors.txt" || true
  # the diff of every mutant not killed, to review (kill it with a test, or list it as equivalent)
  while IFS=: read -r name _; do
    (cd "$dir" && mutmut show "$(echo "$name" | xargs)") >>"$dir/survivors.diff" 2>&1 || true
  done <"$dir/survivors.txt"
  total=$(grep -cE ': (killed|survived|no tests|timeout|suspicious)' "$dir/results.txt" || true)
  killed=$(grep -cE ': killed' "$dir/results.txt" || true)
  left=$(wc -l <"$dir/survivors.txt")
  echo "== $t: killed $killed of $total mutants, $left not killed (list: $dir/survivors.txt)"
  awk -v k="$killed" -v n="$total" -v t="$t" 'BEGIN { if (n > 0) printf "score %s: %.1f %%\n", t, 100 * k / n }'
done
