#!/usr/bin/env bash
# Installs dependencies, builds, and runs every test but the gpu ones; then two
# smaller sanitized builds with clang: ASan+UBSan and libFuzzer (build-san/) of
# the store, server, rendezvous, agent, launcher and worker SDK, running their
# unit tests, the daemon, store, launcher, re-form and SDK integration tests
# (every program they start built sanitized) and a bounded fuzz run of each
# target (the store's wire, and every reader of outside JSON with the few files
# around it); and TSan (build-tsan/) of the threaded parts (store server and
# client, rendezvous, agent, launcher, worker SDK), running their unit tests
# and the daemon, store, launcher and re-form integration tests. Any sanitizer
# report aborts its process and fails the run. Prints how long each stage took.
# Exit status: non-zero on any failure. DDP_SKIP_SANITIZE=1 skips both
# sanitized stages, DDP_SKIP_TSAN=1 only the TSan one.
set -euo pipefail
cd "$(dirname "$0")/.."
stage_start=$SECONDS
stage() {  # prints how long the previous stage took
  echo "test.sh: $1 took $((SECONDS - stage_start)) s (total $SECONDS s)"
  stage_start=$SECONDS
}
scripts/setup.sh --torch2  # the torch2 tests need torch 2.x in .venv
scripts/build.sh -DDDP_WERROR=ON  # a warning in our code fails CI
stage "setup + build"
# --timeout guards tests that forgot their own TIMEOUT property.
(cd build && ctest --output-on-failure --label-exclude gpu --parallel "$(nproc)" --timeout 300 "$@")
stage "ctest"

if [[ ${DDP_SKIP_SANITIZE:-0} == 1 ]]; then exit 0; fi
generator=()
if command -v ninja >/dev/null 2>&1; then generator=(-G Ninja); fi
launcher=()
if command -v ccache >/dev/null 2>&1; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
fi
# RelWithDebInfo: -O2 keeps it quick, -g gives reports file:line. Gloo on: the
# SDK's jobs and the re-form example need it (ASan needs no instrumented libgloo).
cmake -S . -B build-san "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DDDP_SANITIZE=address,undefined -DDDP_FUZZ=ON -DDDP_WITH_NCCL=OFF -DDDP_WITH_GLOO=ON >/dev/null
# The agent's, launcher's and SDK's integration tests that run on any machine
# (no torch, etcd, Slurm or sshd): ddprun, ddp-guard, fake_worker, the example
# trainers and the SDK's workers are built sanitized as their dependencies.
agent_itests=(ddp_integration_launcher ddp_integration_reform ddp_integration_containment
              ddp_integration_health ddp_integration_terminal)
agent_itests_re='ddp_integration_(launcher|reform|containment|health|terminal)'
sdk_itests=(ddp_integration_sdk ddp_integration_reform_example ddp_integration_reform_stall
            ddp_integration_reform_node)
sdk_itests_re='ddp_integration_(sdk|reform_example|reform_stall|reform_node)'
san_targets=(ddp_unit_protocol ddp_unit_server ddp_unit_store ddp_unit_torch_codec
             ddp_integration_daemon ddp_integration_store ddp-rendezvousd ddp-store
             fuzz_native_codec fuzz_torch_codec fuzz_dispatcher
             fuzz_json_input fuzz_error_file fuzz_agent_lines fuzz_status_record fuzz_rdzv_record
             fuzz_config_files fuzz_etcd_reply fuzz_metrics_http fuzz_guard_request
             ddp_unit_rdzv ddp_unit_agent ddp_unit_launcher ddp_unit_sdk "${agent_itests[@]}" "${sdk_itests[@]}")
cmake --build build-san --parallel "$(nproc)" --target "${san_targets[@]}"
stage "sanitized build"
export ASAN_OPTIONS=halt_on_error=1:abort_on_error=1:detect_leaks=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
(cd build-san && ctest --output-on-failure --parallel "$(nproc)" --timeout 300 \
  -R "^(ddp_unit_(protocol|server|store|torch_codec|rdzv|agent|launcher|sdk)|ddp_integration_(daemon|store)|$agent_itests_re|$sdk_itests_re):|^fuzz_")
stage "sanitized ctest (unit, daemon/store/agent/launcher/SDK integration, fuzz)"

if [[ ${DDP_SKIP_TSAN:-0} == 1 ]]; then exit 0; fi
# TSan: the threads of the store server, the TcpStore client, the rendezvous
# keep-alive, the agent's spawner and re-form. No Gloo/NCCL: Debian's libgloo
# is not instrumented, so TSan cannot see the atomics that order its transport
# thread's accesses and reports races inside it that cannot be told from ours
# (the SDK's Gloo jobs run under ASan+UBSan above; its op thread here, in
# ddp_unit_sdk). ddprun, ddp-guard, fake_worker and the daemon are built with
# TSan too, so a race in a child process fails the test that started it.
cmake -S . -B build-tsan "${generator[@]}" "${launcher[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DDDP_SANITIZE=thread -DDDP_WITH_NCCL=OFF -DDDP_WITH_GLOO=OFF >/dev/null
# Only the threaded parts (store server and client, rendezvous, agent,
# launcher, the SDK's op thread), so
# that the stage costs minutes on 2 cores, not a second full build.
tsan_targets=(ddp_unit_common ddp_unit_protocol ddp_unit_server ddp_unit_store ddp_unit_torch_codec
              ddp_unit_rdzv ddp_unit_agent ddp_unit_launcher ddp_unit_sdk ddp_integration_daemon ddp_integration_store
              "${agent_itests[@]}")
cmake --build build-tsan --parallel "$(nproc)" --target "${tsan_targets[@]}"
stage "TSan build"
export TSAN_OPTIONS="halt_on_error=1:abort_on_error=1:second_deadlock_stack=1:suppressions=$PWD/scripts/tsan-suppressions.txt"
# The daemon's memory-bound test (1000 writes of 1 MiB) is a load test: under
# TSan it outlasts its timeout without telling anything about threads.
(cd build-tsan && ctest --output-on-failure --parallel "$(nproc)" --timeout 300 \
  -R "^(ddp_unit_(common|protocol|server|store|torch_codec|rdzv|agent|launcher|sdk)|ddp_integration_(daemon|store)|$agent_itests_re):" \
  -E 'under its memory bound')
stage "TSan ctest (threaded units, daemon/store/agent/launcher integration)"
