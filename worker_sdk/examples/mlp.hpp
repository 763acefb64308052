// A two-hidden-layer perceptron with tanh, forward and backward written out,
// and the seeded regression dataset the example trains it on.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

namespace example {

// y = sin(pi x0) * cos(pi x1) + 0.05 * noise, x uniform in [-1, 1]^2.
struct Dataset {
  std::vector<float> x;  // 2 per sample
  std::vector<float> y;
  std::size_t size() const { return y.size(); }
};
Dataset make_dataset(std::size_t n, std::uint64_t seed);

class Mlp {
 public:
  static constexpr int kIn = 2;
  Mlp(int hidden, std::uint64_t seed);

  // Parameters and gradients as tensors in forward order: W1 b1 W2 b2 W3 b3.
  std::vector<std::span<float>> params();
  std::vector<std::span<float>> grads();
  std::vector<float>& flat_params() { return params_; }

  // Adds d(mean loss)/d(params) over `batch` into the gradients, one layer at a
  // time from the output back; `ready(i)` is called as soon as tensor i's
  // gradient is final (this is where DDP launches bucket all-reduces). Returns
  // the summed (not averaged) squared-error loss of the batch.
  double forward_backward(const Dataset& data, std::span<const std::size_t> batch,
                          const std::function<void(std::size_t)>& ready);
  void zero_grad();
  void sgd_step(float lr);
  // SGD with (torch-style) momentum: v = momentum * v + g; p -= lr * v.
  // `velocity` is the optimizer state, one per parameter.
  void sgd_step(float lr, float momentum, std::span<float> velocity);

 private:
  int hidden_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<std::size_t> offsets_;  // tensor i is [offsets_[i], offsets_[i+1])
  // Activations kept between forward and backward, batch-major.
  std::vector<float> a1_, a2_, out_;
};

}  // namespace example
