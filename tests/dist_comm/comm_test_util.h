// Shared by the local and the MPI tests of dist/comm: the count patterns, the per-rank
// inputs, the sequential references, and the fp32 summation allowance.
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "dist/comm/comm.h"

namespace gpumix::dist::test {

// Uneven counts for n ranks, zeros included: the patterns of the issue (1/2/5, 0/3/7,
// 0/0/10, all on one rank) stretched to n ranks, plus even and all-zero.
inline std::vector<std::vector<int64_t>> count_patterns(int n) {
  std::vector<std::vector<int64_t>> p;
  const int64_t base[4] = {1, 2, 5, 3};
  const int64_t zero_first[4] = {0, 3, 7, 0};
  std::vector<int64_t> a(n), b(n), c(n, 0), d(n, 0), e(n, 0), even(n, 4), zeros(n, 0), big(n);
  for (int r = 0; r < n; ++r) {
    a[r] = base[r % 4];
    b[r] = zero_first[r % 4];
    big[r] = 1000 + 777 * r;  // several blocks of the blocked sum, uneven
  }
  if (n == 1) b[0] = 3;
  c[n - 1] = 10;  // 0/0/10: all on the last rank
  d[0] = 10;      // all on the first rank
  e[n / 2] = 7;   // all on a middle rank
  p = {a, b, c, d, e, even, zeros, big};
  return p;
}

// Rank r's element i: varied magnitudes and signs so that the summation order matters.
inline float input_value(int r, int64_t i, int salt = 0) {
  const int64_t k = (r + 1) * 7919 + i * 104729 + salt * 31;
  const float mant = (float)((k % 2001) - 1000) / 997.0f;
  const float scale = (k % 3 == 0) ? 1024.0f : ((k % 3 == 1) ? 1.0f : 1.0f / 64);
  return mant * scale;
}

inline std::vector<float> rank_input(int r, int64_t n, int salt = 0) {
  std::vector<float> v((size_t)n);
  for (int64_t i = 0; i < n; ++i) v[(size_t)i] = input_value(r, i, salt);
  return v;
}

inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> off(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) off[r] = off[r - 1] + counts[r - 1];
  return off;
}

inline int64_t sum_of(const std::vector<int64_t>& counts) {
  int64_t s = 0;
  for (int64_t c : counts) s += c;
  return s;
}

// all_gather_v reference: rank q contributes rank_input(q, counts[q]).
inline std::vector<float> gather_reference(const std::vector<int64_t>& counts, int salt = 0) {
  std::vector<float> out;
  for (size_t q = 0; q < counts.size(); ++q) {
    std::vector<float> v = rank_input((int)q, counts[q], salt);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

// reduce_scatter_v reference for `rank`: sum in rank order 0 + 1 + ... in fp32 of every
// rank's rank_input(q, total) over rank's block; also the allowance of any other order,
// (n - 1) * FLT_EPSILON * sum |x| per element.
inline std::vector<float> scatter_reference(const std::vector<int64_t>& counts, int rank,
                                            std::vector<double>* allowance = nullptr,
                                            int salt = 0) {
  const int64_t total = sum_of(counts);
  const int64_t off = offsets_of(counts)[rank];
  const int n = (int)counts.size();
  std::vector<float> out((size_t)counts[rank], 0.0f);
  if (allowance) allowance->assign((size_t)counts[rank], 0.0);
  for (int q = 0; q < n; ++q) {
    std::vector<float> v = rank_input(q, total, salt);
    for (int64_t i = 0; i < counts[rank]; ++i) {
      const float x = v[(size_t)(off + i)];
      out[(size_t)i] = q == 0 ? x : out[(size_t)i] + x;
      if (allowance) (*allowance)[(size_t)i] += std::fabs((double)x) * (n - 1) * FLT_EPSILON;
    }
  }
  return out;
}

inline ::testing::AssertionResult bitwise_equal(const std::string& what, const std::vector<float>& a,
                                                const std::vector<float>& b) {
  if (a.size() != b.size())
    return ::testing::AssertionFailure()
           << what << ": sizes differ (" << a.size() << " vs " << b.size() << ")";
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0)
      return ::testing::AssertionFailure()
             << what << ": element " << i << " differs: " << a[i] << " vs " << b[i];
  return ::testing::AssertionSuccess();
}

// |got - ref| <= allowance + FLT_MIN per element; reports the worst element.
inline ::testing::AssertionResult within(const std::string& what, const std::vector<float>& got,
                                         const std::vector<float>& ref,
                                         const std::vector<double>& allowance) {
  if (got.size() != ref.size())
    return ::testing::AssertionFailure()
           << what << ": sizes differ (" << got.size() << " vs " << ref.size() << ")";
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs((double)got[i] - (double)ref[i]);
    const double excess = std::isnan(got[i]) ? INFINITY : err / (allowance[i] + FLT_MIN);
    if (excess > worst) {
      worst = excess;
      wi = i;
    }
  }
  if (worst <= 1) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": worst element " << wi << " is " << got[wi] << ", reference " << ref[wi]
         << ", " << worst << " x the allowance " << allowance[wi];
}

inline std::string counts_str(const std::vector<int64_t>& c) { return detail::format_counts(c); }

}  // namespace gpumix::dist::test

// Expects `stmt` to throw gpumix::Error whose what() contains every given piece.
#define EXPECT_COMM_ERROR(stmt, ...)                                                       \
  do {                                                                                     \
    bool caught_ = false;                                                                  \
    try {                                                                                  \
      stmt;                                                                                \
    } catch (const ::gpumix::Error& e_) {                                                  \
      caught_ = true;                                                                      \
      const std::string msg_ = e_.what();                                                  \
      for (const char* piece_ : {__VA_ARGS__})                                             \
        EXPECT_NE(msg_.find(piece_), std::string::npos)                                    \
            << "message of " #stmt " lacks \"" << piece_ << "\": " << msg_;                \
    }                                                                                      \
    if (!caught_) ADD_FAILURE() << #stmt " did not throw gpumix::Error";                   \
  } while (0)
