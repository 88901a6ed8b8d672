// Tensor: shapes up to 4-D, views that share storage (view, reshape, slice, flat_slice),
// copies, host round trips, undefined and empty tensors, checked data<T>().
#include <gtest/gtest.h>

#include <numeric>

#include "core/ops.h"
#include "core/tensor.h"
#include "test_util.h"

namespace gpumix {
namespace {

std::vector<float> iota_floats(size_t n, float start = 0.0f) {
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), start);
  return v;
}

// ---- shapes ----------------------------------------------------------------------------

TEST(Shape, UpToFourDimensions) {
  const Shape s{2, 3, 4, 5};
  EXPECT_EQ(s.ndim, 4);
  EXPECT_EQ(s.numel(), 120);
  EXPECT_EQ(s.str(), "(2, 3, 4, 5)");
  EXPECT_EQ(Shape{7}.str(), "(7,)");
  EXPECT_EQ(Shape{}.str(), "()");
  EXPECT_EQ(Shape{}.numel(), 1);  // a 0-d shape is one scalar
  EXPECT_EQ(Shape({4, 128, 768}).str(), "(4, 128, 768)");
  EXPECT_TRUE(Shape({2, 3}) == Shape(std::vector<int64_t>{2, 3}));
  EXPECT_TRUE(Shape({2, 3}) != Shape({3, 2}));
  EXPECT_TRUE(Shape({2, 3}) != Shape({2, 3, 1}));

  Tensor t = Tensor::zeros({2, 3, 4, 5});
  EXPECT_EQ(t.dim(), 4);
  EXPECT_EQ(t.numel(), 120);
  EXPECT_EQ(t.nbytes(), 480);
  EXPECT_EQ(t.size(0), 2);
  EXPECT_EQ(t.size(3), 5);
  EXPECT_EQ(t.size(-1), 5);
  EXPECT_EQ(t.size(-4), 2);
  EXPECT_THROW_WITH(t.size(4), Error, "dimension 4", "(2, 3, 4, 5)");
  EXPECT_THROW_WITH(t.size(-5), Error, "dimension -5", "(2, 3, 4, 5)");
}

TEST(Shape, FiveDimensionsThrow) {
  EXPECT_THROW_WITH(Shape({1, 2, 3, 4, 5}), Error, "at most 4 dimensions", "got 5");
  EXPECT_THROW_WITH(Shape(std::vector<int64_t>{1, 1, 1, 1, 1, 1}), Error, "at most 4", "got 6");
  EXPECT_THROW_WITH(Tensor::zeros({2, 2, 2, 2, 2}), Error, "at most 4 dimensions");
}

TEST(Shape, NegativeDimensionThrows) {
  EXPECT_THROW_WITH(Tensor::empty({2, -3}), Error, "negative dimension", "(2, -3)");
}

TEST(Tensor, FactoriesAndStr) {
  Tensor z = Tensor::zeros({2, 3});
  for (float v : z.to_vector()) EXPECT_EQ(v, 0.0f);
  Tensor f = Tensor::full({4}, 2.5f);
  for (float v : f.to_vector()) EXPECT_EQ(v, 2.5f);
  Tensor i = Tensor::full({3}, 7.0f, DType::i32);
  EXPECT_EQ(i.to_int_vector(), (std::vector<int32_t>{7, 7, 7}));
  Tensor h = Tensor::full({2}, 1.5f, DType::bf16);
  EXPECT_EQ(h.to_vector(), (std::vector<float>{1.5f, 1.5f}));
  EXPECT_EQ(z.str(), "Tensor(f32, (2, 3), cpu:0)");
  EXPECT_EQ(h.str(), "Tensor(bf16, (2,), cpu:0)");
  EXPECT_EQ(Tensor().str(), "Tensor(undefined)");
  EXPECT_EQ(z.device(), Device::cpu());
  EXPECT_EQ(z.dtype(), DType::f32);
  EXPECT_EQ(z.offset(), 0);
}

// ---- views share storage -----------------------------------------------------------------

TEST(TensorView, ViewInfersMinusOneAndSharesStorage) {
  Tensor base = Tensor::from_vector(iota_floats(24), {2, 3, 4});
  Tensor v = base.view({-1, 4});
  EXPECT_EQ(v.shape(), Shape({6, 4}));
  EXPECT_EQ(v.storage(), base.storage());
  EXPECT_EQ(v.raw_data(), base.raw_data());
  EXPECT_EQ(base.view({2, -1}).shape(), Shape({2, 12}));
  EXPECT_EQ(base.view({-1}).shape(), Shape({24}));
  EXPECT_EQ(base.view({1, 2, -1, 3}).shape(), Shape({1, 2, 4, 3}));
  EXPECT_EQ(base.reshape({4, 6}).storage(), base.storage());

  // Write through the view, read it in the base and in another view.
  v.data<float>()[5] = -1.0f;  // row 1, column 1 of the (6, 4) view = flat element 5
  EXPECT_EQ(base.to_vector()[5], -1.0f);
  EXPECT_EQ(base.reshape({4, 6}).to_vector()[5], -1.0f);
  base.view({-1}).flat_slice(23, 1).fill_(99.0f);
  EXPECT_EQ(v.to_vector()[23], 99.0f);
}

TEST(TensorView, BadViewsThrowWithBothShapes) {
  Tensor base = Tensor::zeros({2, 3, 4});
  EXPECT_THROW_WITH(base.view({5, 5}), Error, "(5, 5)", "(2, 3, 4)", "25", "24");
  EXPECT_THROW_WITH(base.view({-1, -1}), Error, "only one dimension may be -1");
  EXPECT_THROW_WITH(base.view({-1, 5}), Error, "(-1, 5)", "(2, 3, 4)", "24");
  EXPECT_THROW_WITH(base.reshape({25}), Error, "(25,)", "(2, 3, 4)");
}

TEST(TensorView, SliceAlongFirstDimension) {
  Tensor base = Tensor::from_vector(iota_floats(12), {4, 3});
  Tensor s = base.slice(1, 3);
  EXPECT_EQ(s.shape(), Shape({2, 3}));
  EXPECT_EQ(s.offset(), 3);
  EXPECT_EQ(s.storage(), base.storage());
  EXPECT_EQ(s.data<float>(), base.data<float>() + 3);
  EXPECT_EQ(s.to_vector(), (std::vector<float>{3, 4, 5, 6, 7, 8}));

  // A slice of a slice, and a view of a slice, keep adding offsets.
  Tensor ss = s.slice(1, 2);
  EXPECT_EQ(ss.offset(), 6);
  EXPECT_EQ(ss.to_vector(), (std::vector<float>{6, 7, 8}));
  Tensor sv = s.view({-1});
  EXPECT_EQ(sv.offset(), 3);
  EXPECT_EQ(sv.shape(), Shape({6}));

  // Writes through a slice land in the base, and only in the slice's rows.
  s.fill_(-2.0f);
  EXPECT_EQ(base.to_vector(), (std::vector<float>{0, 1, 2, -2, -2, -2, -2, -2, -2, 9, 10, 11}));
  ss.data<float>()[0] = 42.0f;
  EXPECT_EQ(base.to_vector()[6], 42.0f);

  // 4-D slice: offset counts whole rows of the first dimension.
  Tensor b4 = Tensor::zeros({3, 2, 2, 5});
  EXPECT_EQ(b4.slice(2, 3).offset(), 40);
  EXPECT_EQ(b4.slice(2, 3).shape(), Shape({1, 2, 2, 5}));

  EXPECT_THROW_WITH(base.slice(2, 5), Error, "slice [2, 5)", "4", "(4, 3)");
  EXPECT_THROW_WITH(base.slice(3, 2), Error, "slice [3, 2)");
  EXPECT_THROW_WITH(base.slice(-1, 2), Error, "slice [-1, 2)");
}

TEST(TensorView, FlatSlice) {
  Tensor base = Tensor::from_vector(iota_floats(12), {3, 4});
  Tensor f = base.slice(1, 3).flat_slice(2, 5);  // offsets add: 4 + 2
  EXPECT_EQ(f.shape(), Shape({5}));
  EXPECT_EQ(f.offset(), 6);
  EXPECT_EQ(f.storage(), base.storage());
  EXPECT_EQ(f.to_vector(), (std::vector<float>{6, 7, 8, 9, 10}));
  f.fill_(0.5f);
  EXPECT_EQ(base.to_vector(), (std::vector<float>{0, 1, 2, 3, 4, 5, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 11}));
  EXPECT_THROW_WITH(base.flat_slice(10, 3), Error, "flat_slice [10, 13)", "12 elements");
  EXPECT_THROW_WITH(base.flat_slice(-1, 1), Error, "flat_slice");
  EXPECT_EQ(base.flat_slice(12, 0).numel(), 0);
}

TEST(TensorView, StorageLivesUntilTheLastView) {
  const Device dev = Device::cpu(40);
  Allocator& a = allocator(dev);
  const int64_t before = a.stats().in_use;
  Tensor view;
  {
    Tensor base = Tensor::from_vector(iota_floats(1000), {10, 100}, dev);
    view = base.slice(3, 4);
    EXPECT_EQ(a.stats().in_use, before + Allocator::block_size(4000));
  }
  EXPECT_EQ(a.stats().in_use, before + Allocator::block_size(4000));  // the view holds it
  EXPECT_EQ(view.to_vector(), iota_floats(100, 300));
  view = Tensor();
  EXPECT_EQ(a.stats().in_use, before);
}

TEST(TensorView, BorrowDoesNotAllocate) {
  const Device dev = Device::cpu(41);
  std::vector<float> host = iota_floats(6);
  const int64_t before = allocator(dev).stats().in_use;
  {
    Tensor t = Tensor::borrow(host.data(), {2, 3}, DType::f32, dev);
    EXPECT_EQ(allocator(dev).stats().in_use, before);
    EXPECT_EQ(t.data<float>(), host.data());
    t.slice(1, 2).fill_(8.0f);
  }
  EXPECT_EQ(host, (std::vector<float>{0, 1, 2, 8, 8, 8}));
  EXPECT_EQ(allocator(dev).stats().in_use, before);
}

// ---- copies --------------------------------------------------------------------------------

TEST(TensorCopy, CloneIsIndependent) {
  Tensor base = Tensor::from_vector(iota_floats(6), {2, 3});
  Tensor c = base.clone();
  EXPECT_NE(c.storage(), base.storage());
  EXPECT_EQ(c.shape(), base.shape());
  EXPECT_EQ(c.to_vector(), base.to_vector());
  c.fill_(1.0f);
  EXPECT_EQ(base.to_vector(), iota_floats(6));

  // Cloning a slice copies only the slice, to a fresh storage at offset 0.
  Tensor cs = base.slice(1, 2).clone();
  EXPECT_EQ(cs.offset(), 0);
  EXPECT_EQ(cs.to_vector(), (std::vector<float>{3, 4, 5}));
}

TEST(TensorCopy, ToAnotherDeviceAndBack) {
  const Device dev = Device::cpu(42);
  Tensor base = Tensor::from_vector(iota_floats(6), {3, 2});
  Tensor moved = base.to(dev);
  EXPECT_EQ(moved.device(), dev);
  EXPECT_NE(moved.storage(), base.storage());
  EXPECT_EQ(moved.to_vector(), base.to_vector());
  EXPECT_EQ(moved.str(), "Tensor(f32, (3, 2), cpu:42)");
  Tensor back = moved.to(Device::cpu());
  EXPECT_EQ(back.device(), Device::cpu());
  EXPECT_EQ(back.to_vector(), base.to_vector());

  Tensor dst = Tensor::zeros({6}, DType::f32, dev);
  dst.copy_from(base);  // same numel, any shape and device
  EXPECT_EQ(dst.to_vector(), base.to_vector());
  EXPECT_THROW_WITH(dst.copy_from(Tensor::zeros({5})), Error, "copy", "dst", "6", "5");
  EXPECT_THROW_WITH(dst.copy_from(Tensor::zeros({6}, DType::bf16)), Error, "copy", "f32", "bf16",
                    "convert");
}

TEST(TensorCopy, ToSameDtypeIsACopy) {
  Tensor base = Tensor::from_vector(iota_floats(4), {4});
  Tensor same = base.to(DType::f32);
  EXPECT_NE(same.storage(), base.storage());
  EXPECT_EQ(same.to_vector(), base.to_vector());
}

TEST(TensorCopy, VectorRoundTrips) {
  const std::vector<float> f = {1.5f, -2.25f, 3.0e-30f, 7.0e30f, 0.0f, -0.0f};
  Tensor t = Tensor::from_vector(f, {2, 3});
  EXPECT_EQ(t.dtype(), DType::f32);
  EXPECT_TRUE(test::bitwise_equal("f32 round trip", t.to_vector(), f));

  const std::vector<int32_t> ints = {0, -1, 2147483647, -2147483647 - 1, 5};
  Tensor ti = Tensor::from_vector(ints, {5});
  EXPECT_EQ(ti.dtype(), DType::i32);
  EXPECT_EQ(ti.to_int_vector(), ints);
  Tensor ti_dev = Tensor::from_vector(ints, {5}, Device::cpu(43));
  EXPECT_EQ(ti_dev.device(), Device::cpu(43));
  EXPECT_EQ(ti_dev.to_int_vector(), ints);

  EXPECT_THROW_WITH(Tensor::from_vector(f, {4, 2}), Error, "from_vector", "6 values", "(4, 2)", "8");
  EXPECT_THROW_WITH(Tensor::from_vector(ints, {2}), Error, "from_vector", "5 values", "(2,)");
  EXPECT_THROW_WITH(ti.to_vector(), Error, "i32", "to_int_vector");
  EXPECT_THROW_WITH(t.to_int_vector(), Error, "to_int_vector", "i32", "f32");
}

TEST(TensorCopy, Item) {
  EXPECT_EQ(Tensor::full({1}, 3.25f).item(), 3.25f);
  EXPECT_EQ(Tensor::full({1, 1, 1, 1}, -1.0f).item(), -1.0f);
  EXPECT_EQ(Tensor::from_vector(std::vector<int32_t>{-7}, {1}).item(), -7.0f);
  EXPECT_EQ(Tensor::full({1}, 0.5f, DType::bf16).item(), 0.5f);
  Tensor t = Tensor::from_vector(iota_floats(6), {2, 3});
  EXPECT_EQ(t.flat_slice(4, 1).item(), 4.0f);
  EXPECT_THROW_WITH(t.item(), Error, "item()", "6 elements", "(2, 3)");
  EXPECT_THROW_WITH(Tensor::zeros({0}).item(), Error, "item()", "0 elements");
}

// ---- checked access ----------------------------------------------------------------------

TEST(TensorAccess, DataWithTheWrongTypeNamesBothDtypes) {
  Tensor f = Tensor::zeros({2, 3});
  Tensor h = Tensor::zeros({2, 3}, DType::bf16);
  Tensor i = Tensor::zeros({4}, DType::i32);
  EXPECT_NE(f.data<float>(), nullptr);
  EXPECT_NE(h.data<bf16>(), nullptr);
  EXPECT_NE(i.data<int32_t>(), nullptr);
  EXPECT_THROW_WITH(f.data<bf16>(), Error, "data", "expected a bf16", "got f32", "(2, 3)");
  EXPECT_THROW_WITH(f.data<int32_t>(), Error, "expected a i32", "got f32");
  EXPECT_THROW_WITH(h.data<float>(), Error, "expected a f32", "got bf16");
  EXPECT_THROW_WITH(i.data<float>(), Error, "expected a f32", "got i32", "(4,)");
}

TEST(TensorAccess, UndefinedTensorsGiveClearErrors) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  EXPECT_TRUE(Tensor::zeros({1}).defined());
  EXPECT_THROW_WITH(u.data<float>(), Error, "undefined");
  EXPECT_THROW_WITH(u.raw_data(), Error, "undefined");
  EXPECT_THROW_WITH(u.view({1}), Error, "undefined");
  EXPECT_THROW_WITH(u.slice(0, 1), Error, "slice of an undefined tensor");
  EXPECT_THROW_WITH(u.flat_slice(0, 1), Error, "flat_slice of an undefined tensor");
  EXPECT_THROW_WITH(u.to_vector(), Error, "undefined");
  EXPECT_THROW_WITH(u.item(), Error, "undefined");
  EXPECT_THROW_WITH(u.clone(), Error, "undefined");
  EXPECT_THROW_WITH(u.to(DType::bf16), Error, "undefined");
  EXPECT_THROW_WITH(u.fill_(1.0f), Error, "undefined");
  Tensor dst = Tensor::zeros({1});
  EXPECT_THROW_WITH(dst.copy_from(u), Error, "undefined");
  EXPECT_THROW_WITH(ops::sum(u), Error, "sum", "undefined");
}

// ---- empty tensors -------------------------------------------------------------------------

TEST(TensorEmpty, ZeroElementTensorsWork) {
  Tensor e = Tensor::zeros({0, 3});
  EXPECT_TRUE(e.defined());
  EXPECT_EQ(e.numel(), 0);
  EXPECT_EQ(e.nbytes(), 0);
  EXPECT_TRUE(e.to_vector().empty());
  EXPECT_EQ(e.view({-1, 3}).shape(), Shape({0, 3}));
  EXPECT_EQ(e.view({3, 0}).shape(), Shape({3, 0}));
  EXPECT_EQ(e.slice(0, 0).numel(), 0);
  EXPECT_EQ(e.clone().numel(), 0);
  EXPECT_EQ(e.to(DType::bf16).numel(), 0);
  EXPECT_EQ(e.to(Device::cpu(44)).numel(), 0);
  e.fill_(1.0f);
  e.zero_();
  EXPECT_EQ(ops::sum(e), 0.0);
  EXPECT_EQ(ops::sum_squares(e), 0.0);
  Tensor out = Tensor::zeros({0, 3});
  ops::add(out, e, e);
  ops::scale(out, e, 2.0f);
  EXPECT_TRUE(Tensor::from_vector(std::vector<float>{}, {0}).to_vector().empty());
  EXPECT_TRUE(Tensor::from_vector(std::vector<int32_t>{}, {2, 0}).to_int_vector().empty());

  // A slice with no rows of a non-empty tensor.
  Tensor base = Tensor::zeros({4, 3});
  Tensor none = base.slice(4, 4);
  EXPECT_EQ(none.numel(), 0);
  EXPECT_TRUE(none.to_vector().empty());
}

TEST(TensorEmpty, EmptyTakesNoMemory) {
  const Device dev = Device::cpu(45);
  const AllocatorStats before = allocator(dev).stats();
  Tensor e = Tensor::empty({0, 1024}, DType::f32, dev);
  EXPECT_EQ(allocator(dev).stats().in_use, before.in_use);
  EXPECT_EQ(allocator(dev).stats().system_allocs, before.system_allocs);
}

TEST(DTypeNames, ParseAndPrint) {
  EXPECT_STREQ(dtype_name(DType::f32), "f32");
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::i32), "i32");
  EXPECT_EQ(dtype_from_name("bf16"), DType::bf16);
  EXPECT_EQ(dtype_from_name("i32"), DType::i32);
  EXPECT_EQ(dtype_from_name("f32"), DType::f32);
  EXPECT_EQ(dtype_from_name("f16"), DType::f16);
  EXPECT_EQ(dtype_from_name("fp16"), DType::f16);
  EXPECT_THROW_WITH(dtype_from_name("fp8"), InputError, "unknown dtype 'fp8'",
                    "f32 (or fp32), bf16, i32, f16 (or fp16)");
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::i32), 4u);
  // Every row of the table parses back to itself by its name and its alias.
  for (const DTypeInfo& d : kDTypes) {
    EXPECT_EQ(dtype_from_name(d.name), d.dtype) << d.name;
    if (d.alias) {
      EXPECT_EQ(dtype_from_name(d.alias), d.dtype) << d.alias;
    }
    EXPECT_EQ(is_16bit_float(d.dtype), d.is_float && d.size == 2) << d.name;
  }
}

TEST(Errors, CarryTheSourceLocation) {
  try {
    Tensor::zeros({2}).view({3});
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[core/tensor.cpp:"), std::string::npos) << e.what();
  }
}

TEST(Errors, InputErrorsNameNoSourceLocation) {
  // A user's mistake reads as what to fix; a broken invariant also says where.
  const int64_t steps = 0;
  try {
    GPUMIX_CHECK_INPUT(steps >= 1, "--steps must be at least 1, got ", steps);
    FAIL() << "no throw";
  } catch (const InputError& e) {
    EXPECT_STREQ(e.what(), "--steps must be at least 1, got 0");
  }
  try {
    GPUMIX_CHECK(steps >= 1, "steps ", steps);
    FAIL() << "no throw";
  } catch (const InputError&) {
    FAIL() << "GPUMIX_CHECK threw an InputError";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("steps 0 ["), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test_tensor.cpp:"), std::string::npos) << e.what();
  }
}

TEST(Errors, FormatBytes) {
  EXPECT_EQ(format_bytes(100), "100 B");
  EXPECT_EQ(format_bytes(12 * 1024), "12.0 KiB");
  EXPECT_EQ(format_bytes(731ll << 20), "731.0 MiB");
  EXPECT_EQ(format_bytes(3ll << 29), "1.50 GiB");
}

}  // namespace
}  // namespace gpumix
