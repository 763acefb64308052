// The worker SDK in one include: init, process groups, reducer, sampler, run.
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
