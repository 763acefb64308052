// Every rank contributes rank+1; after the all-reduce each holds the sum.
#include <cstdio>
#include <ddp/sdk.hpp>
#include <vector>

int main() {
  ddp::Context ctx = ddp::init();
  ddp::ProcessGroupOptions options;
  options.backend = "gloo";
  ddp::ProcessGroup pg(ctx, options);
  std::vector<double> v{static_cast<double>(ctx.rank + 1)};
  pg.all_reduce(v.data(), v.size(), ddp::DataType::kFloat64, ddp::ReduceOp::kSum);
  const double expected = ctx.world_size * (ctx.world_size + 1) / 2.0;
  std::printf("consumer rank=%d world_size=%d sum=%g\n", ctx.rank, ctx.world_size, v[0]);
  return v[0] == expected ? 0 : 1;
}
