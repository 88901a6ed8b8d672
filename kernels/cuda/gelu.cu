// GELU, tanh approximation, bf16 or f16 in/out, fp32 arithmetic (map.cuh: 16-byte accesses).
#include "kernels/cuda/map.cuh"

namespace gpumix::kernels::cuda {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;

struct GeluOp {
  static constexpr bool kReadsOut = false;
  __device__ float operator()(float x, float, float) const {
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
  }
};
// x = inp, y = dout, o = dinp: dinp += dout * gelu'(inp)
struct GeluBackwardOp {
  static constexpr bool kReadsOut = true;
  __device__ float operator()(float x, float g, float o) const {
    const float th = tanhf(kSqrt2OverPi * (x + 0.044715f * x * x * x));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * 0.044715f * x * x);
    return o + g * (0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du);
  }
};
}  // namespace

void gelu_forward(bf16* out, const bf16* inp, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, inp, (const bf16*)nullptr, GeluOp{}, n, stream);
}
void gelu_forward(f16* out, const f16* inp, int64_t n, cudaStream_t stream) {
  detail::launch_map(out, inp, (const f16*)nullptr, GeluOp{}, n, stream);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t n,
                   cudaStream_t stream) {
  detail::launch_map(dinp, inp, dout, GeluBackwardOp{}, n, stream);
}
void gelu_backward(f16* dinp, const f16* inp, const f16* dout, int64_t n,
                   cudaStream_t stream) {
  detail::launch_map(dinp, inp, dout, GeluBackwardOp{}, n, stream);
}

}  // namespace gpumix::kernels::cuda
