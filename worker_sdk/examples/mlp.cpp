#include "mlp.hpp"

#include <cmath>
#include <numbers>
#include <random>

namespace example {

Dataset make_dataset(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::normal_distribution<float> noise(0.0f, 1.0f);
  Dataset d;
  d.x.resize(2 * n);
  d.y.resize(n);
  const float pi = std::numbers::pi_v<float>;
  for (std::size_t i = 0; i < n; ++i) {
    const float x0 = u(rng), x1 = u(rng);
    d.x[2 * i] = x0;
    d.x[2 * i + 1] = x1;
    d.y[i] = std::sin(pi * x0) * std::cos(pi * x1) + 0.05f * noise(rng);
  }
  return d;
}

Mlp::Mlp(int hidden, std::uint64_t seed) : hidden_(hidden) {
  const std::size_t h = static_cast<std::size_t>(hidden);
  const std::size_t sizes[] = {h * kIn, h, h * h, h, h, 1};
  offsets_.push_back(0);
  for (std::size_t s : sizes) offsets_.push_back(offsets_.back() + s);
  params_.assign(offsets_.back(), 0.0f);
  grads_.assign(offsets_.back(), 0.0f);
  // Xavier-uniform weights, zero biases; same seed -> same model on every rank.
  std::mt19937_64 rng(seed);
  const std::size_t fan_in[] = {kIn, h, h};
  const std::size_t fan_out[] = {h, h, 1};
  for (int layer = 0; layer < 3; ++layer) {
    const float limit = std::sqrt(6.0f / static_cast<float>(fan_in[layer] + fan_out[layer]));
    std::uniform_real_distribution<float> u(-limit, limit);
    for (std::size_t i = offsets_[2 * layer]; i < offsets_[2 * layer + 1]; ++i) params_[i] = u(rng);
  }
}

std::vector<std::span<float>> Mlp::params() {
  std::vector<std::span<float>> out;
  for (std::size_t i = 0; i + 1 < offsets_.size(); ++i) {
    out.emplace_back(params_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  return out;
}

std::vector<std::span<float>> Mlp::grads() {
  std::vector<std::span<float>> out;
  for (std::size_t i = 0; i + 1 < offsets_.size(); ++i) {
    out.emplace_back(grads_.data() + offsets_[i], offsets_[i + 1] - offsets_[i]);
  }
  return out;
}

void Mlp::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void Mlp::sgd_step(float lr) {
  for (std::size_t i = 0; i < params_.size(); ++i) params_[i] -= lr * grads_[i];
}

void Mlp::sgd_step(float lr, float momentum, std::span<float> velocity) {
  for (std::size_t i = 0; i < params_.size(); ++i) {
    velocity[i] = momentum * velocity[i] + grads_[i];
    params_[i] -= lr * velocity[i];
  }
}

double Mlp::forward_backward(const Dataset& data, std::span<const std::size_t> batch,
                             const std::function<void(std::size_t)>& ready) {
  const std::size_t h = static_cast<std::size_t>(hidden_);
  const std::size_t n = batch.size();
  const float* w1 = params_.data() + offsets_[0];
  const float* b1 = params_.data() + offsets_[1];
  const float* w2 = params_.data() + offsets_[2];
  const float* b2 = params_.data() + offsets_[3];
  const float* w3 = params_.data() + offsets_[4];
  const float b3 = params_[offsets_[5]];
  a1_.resize(n * h);
  a2_.resize(n * h);
  out_.resize(n);

  // Forward.
  double loss = 0.0;
  for (std::size_t s = 0; s < n; ++s) {
    const float* x = &data.x[2 * batch[s]];
    float* a1 = &a1_[s * h];
    float* a2 = &a2_[s * h];
    for (std::size_t j = 0; j < h; ++j)
      a1[j] = std::tanh(w1[j * kIn] * x[0] + w1[j * kIn + 1] * x[1] + b1[j]);
    for (std::size_t j = 0; j < h; ++j) {
      float z = b2[j];
      const float* row = w2 + j * h;
      for (std::size_t k = 0; k < h; ++k) z += row[k] * a1[k];
      a2[j] = std::tanh(z);
    }
    float p = b3;
    for (std::size_t j = 0; j < h; ++j) p += w3[j] * a2[j];
    const float err = p - data.y[batch[s]];
    out_[s] = err / static_cast<float>(n);  // d(mean 0.5 err^2)/dp
    loss += 0.5 * static_cast<double>(err) * err;
  }

  float* gw1 = grads_.data() + offsets_[0];
  float* gb1 = grads_.data() + offsets_[1];
  float* gw2 = grads_.data() + offsets_[2];
  float* gb2 = grads_.data() + offsets_[3];
  float* gw3 = grads_.data() + offsets_[4];
  float* gb3 = grads_.data() + offsets_[5];

  // Output layer, then announce its gradients so their all-reduce can start
  // while the hidden layers are still being differentiated.
  std::vector<float> dz2(n * h);
  for (std::size_t s = 0; s < n; ++s) {
    const float dp = out_[s];
    const float* a2 = &a2_[s * h];
    for (std::size_t j = 0; j < h; ++j) {
      gw3[j] += dp * a2[j];
      dz2[s * h + j] = dp * w3[j] * (1.0f - a2[j] * a2[j]);
    }
    *gb3 += dp;
  }
  ready(5);
  ready(4);

  std::vector<float> dz1(n * h, 0.0f);
  for (std::size_t s = 0; s < n; ++s) {
    const float* d = &dz2[s * h];
    const float* a1 = &a1_[s * h];
    float* da1 = &dz1[s * h];
    for (std::size_t j = 0; j < h; ++j) {
      const float dj = d[j];
      float* grow = gw2 + j * h;
      const float* wrow = w2 + j * h;
      for (std::size_t k = 0; k < h; ++k) {
        grow[k] += dj * a1[k];
        da1[k] += dj * wrow[k];
      }
      gb2[j] += dj;
    }
    for (std::size_t k = 0; k < h; ++k) da1[k] *= 1.0f - a1[k] * a1[k];
  }
  ready(3);
  ready(2);

  for (std::size_t s = 0; s < n; ++s) {
    const float* x = &data.x[2 * batch[s]];
    const float* d = &dz1[s * h];
    for (std::size_t j = 0; j < h; ++j) {
      gw1[j * kIn] += d[j] * x[0];
      gw1[j * kIn + 1] += d[j] * x[1];
      gb1[j] += d[j];
    }
  }
  ready(1);
  ready(0);
  return loss;
}

}  // namespace example
