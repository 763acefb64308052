// The worker SDK in one include (docs/worker-sdk.md). It brings in:
//   init.hpp           ddp::init(): the job as the launcher's env describes it (Context)
//   process_group.hpp  ProcessGroup: collectives over Gloo or NCCL
//   work.hpp           Work: the handle of an asynchronous collective
//   types.hpp          element types and reduction operations
//   reducer.hpp        Reducer: DDP's gradient buckets, all-reduced during backward
//   sampler.hpp        DistributedSampler, with reshard() for a re-formed world
//   elastic_group.hpp  ElasticGroup, MembershipChanged, broadcast_state: re-form in place
//   heartbeat.hpp      ddp::heartbeat() and ddp::Section: liveness for ddprun
//   telemetry.hpp      ddp::report_first_step(): startup telemetry for ddprun
//   run.hpp            ddp::run: the main() wrapper that writes the error file
//   ddp/common/error.hpp  the ddp::Error hierarchy
// Link the CMake target ddp::sdk (find_package(ddp)).
#pragma once

#include "ddp/common/error.hpp"
#include "ddp/elastic_group.hpp"
#include "ddp/heartbeat.hpp"
#include "ddp/init.hpp"
#include "ddp/process_group.hpp"
#include "ddp/reducer.hpp"
#include "ddp/run.hpp"
#include "ddp/sampler.hpp"
#include "ddp/telemetry.hpp"
#include "ddp/types.hpp"
#include "ddp/work.hpp"
