// Multiple-choice evaluation on llm.c's eval files (nn/eval.h): files written here read back
// field by field; every kind of bad file refused naming the problem and its numbers; an
// example's padded, truncated rows give each completion the loss of its own unpadded
// sequence (on a small random model), and the prediction follows the mean loss per
// completion token (the sum on request).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "nn/eval.h"
#include "nn/gpt.h"
#include "nn/infer.h"
#include "choices_test_file.h"
#include "nn_test_util.h"

namespace gpumix {
namespace {

namespace fs = std::filesystem;

// The file of `examples` (header fields overridable), through the tests' writer.
std::string choices_bytes(const std::vector<ChoiceExample>& examples, int32_t magic = kChoicesMagic,
                          int32_t version = kChoicesVersion, int32_t count = -1) {
  std::vector<test::Choice> plain;
  for (const ChoiceExample& e : examples) plain.push_back({e.index, e.label, e.context, e.completions});
  return test::choices_file_bytes(plain, magic, version, count);
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = (fs::temp_directory_path() / ("gpumix_choices_" + std::to_string(::getpid()) + "_" + name)).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::vector<ChoiceExample> three_examples() {
  return {{0, 2, {1, 2, 3}, {{4}, {5, 6}, {7, 8, 9}, {10}}},
          {1, 0, {9, 8}, {{1, 1}, {2}, {3, 3, 3}, {4}}},
          {2, 3, {5}, {{6}, {7}, {8}, {9, 10}}}};
}

// Expects read_choices(path, vocab) to throw an InputError holding every part.
void expect_refused(const std::string& path, int64_t vocab, std::initializer_list<std::string> parts) {
  try {
    read_choices(path, vocab);
    ADD_FAILURE() << path << " was read";
  } catch (const InputError& e) {
    for (const std::string& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

TEST(Choices, AFileReadsBackFieldByField) {
  const std::vector<ChoiceExample> written = three_examples();
  const std::string path = write_temp("good.bin", choices_bytes(written));
  const std::vector<ChoiceExample> read = read_choices(path, 11);
  ASSERT_EQ(read.size(), written.size());
  for (size_t k = 0; k < read.size(); ++k) {
    EXPECT_EQ(read[k].index, written[k].index);
    EXPECT_EQ(read[k].label, written[k].label);
    EXPECT_EQ(read[k].context, written[k].context);
    EXPECT_EQ(read[k].completions, written[k].completions);
  }
  fs::remove(path);
}

TEST(Choices, BadFilesAreRefusedWithTheirNumbers) {
  const std::vector<ChoiceExample> good = three_examples();
  const std::string bytes = choices_bytes(good);
  std::vector<std::string> paths;
  auto file = [&](const std::string& name, const std::string& b) {
    paths.push_back(write_temp(name, b));
    return paths.back();
  };
  expect_refused(file("magic.bin", choices_bytes(good, 20240520)), 0,
                 {"magic is 20240520", "expected 20240522", "token shard", "--data"});
  expect_refused(file("version.bin", choices_bytes(good, kChoicesMagic, 2)), 0, {"version 2", "version 1"});
  expect_refused(file("header.bin", bytes.substr(0, 100)), 0, {"holds 100 bytes", "1024-byte header"});
  expect_refused(file("none.bin", choices_bytes({})), 0, {"holds 0 examples"});
  // The last example cut in the middle.
  expect_refused(file("cut.bin", bytes.substr(0, bytes.size() - 3)), 0,
                 {"truncated", "example 2", "says it holds"});
  // The header counts 4 examples; the file holds 3.
  expect_refused(file("count.bin", choices_bytes(good, kChoicesMagic, kChoicesVersion, 4)), 0,
                 {"truncated", "example 3"});
  // A count past anything the bytes could hold is not taken on trust (no allocation of it).
  expect_refused(file("huge.bin", choices_bytes(good, kChoicesMagic, kChoicesVersion, 1 << 30)), 0,
                 {"truncated", "example 3"});
  // ... or 2: bytes are left.
  expect_refused(file("trailing.bin", choices_bytes(good, kChoicesMagic, kChoicesVersion, 2)), 0,
                 {"follow the last of the header's 2 examples"});
  // A token id past the vocabulary (10, example 0's completion 3, at vocabulary 10).
  expect_refused(file("vocab.bin", bytes), 10,
                 {"example 0 (index 0)", "completion 3 token 0 is id 10", "vocabulary of 10"});
  std::vector<ChoiceExample> bad_label = good;
  bad_label[1].label = 4;
  expect_refused(file("label.bin", choices_bytes(bad_label)), 0,
                 {"example 1 (index 1)", "label 4", "past its 4 completions"});
  std::vector<ChoiceExample> empty = good;
  empty[2].completions[1].clear();
  expect_refused(file("empty.bin", choices_bytes(empty)), 0, {"example 2 (index 2)", "empty completion 1"});
  // A size field that disagrees with the fields.
  std::string sized = bytes;
  sized[1024 + 2] = (char)(sized[1024 + 2] - 2);
  expect_refused(file("size.bin", sized), 0, {"example 0", "says it holds", "its fields take"});
  std::string marker = bytes;
  marker[1024] = 7;
  expect_refused(file("marker.bin", marker), 0, {"example 0 at byte 1024", "not the start marker 65535"});
  for (const std::string& p : paths) fs::remove(p);
}

// Head size 8, a window of 8: short enough that example 2's context is cut.
GPTConfig choice_config() {
  GPTConfig c = test::tiny_config();
  c.C = 16;
  c.NH = 2;
  c.V = 23;
  c.T = 8;
  return c;
}

// The summed loss of `completion` after `context` from one unpadded row of the sequence's last
// T + 1 tokens: the reference.
double reference_sum(const GPT& model, const std::vector<int32_t>& context, const std::vector<int32_t>& completion) {
  std::vector<int32_t> seq = context;
  seq.insert(seq.end(), completion.begin(), completion.end());
  const int64_t T = model.config().T;
  if ((int64_t)seq.size() > T + 1) seq.erase(seq.begin(), seq.end() - (T + 1));
  const int64_t n = (int64_t)seq.size() - 1;
  std::vector<int32_t> in(seq.begin(), seq.end() - 1), tg(seq.begin() + 1, seq.end());
  for (int64_t t = 0; t < n - (int64_t)completion.size(); ++t) tg[t] = -1;
  const std::vector<float> losses =
      token_losses(model, Tensor::from_vector(in, {1, n}), Tensor::from_vector(tg, {1, n})).to_vector();
  double sum = 0;
  for (float x : losses) sum += x;
  return sum;
}

TEST(Choices, PaddedRowsGiveEachCompletionItsOwnLoss) {
  GPT model(choice_config(), Device::cpu(), 5, DType::f32);
  float* p = model.params().data<float>();
  for (int64_t i = 0; i < model.num_params(); ++i) p[i] *= 4;  // peaked: the completions' losses differ
  model.sync_compute_params();
  const std::vector<ChoiceExample> examples = {
      {0, 0, {1, 2, 3}, {{4}, {5, 6}, {7, 8, 9}, {10}}},
      {1, 0, {11, 12}, {{13, 14, 15, 16}, {17}, {18, 19}, {20, 21, 22}}},
      {2, 0, {1, 3, 5, 7, 9, 11, 13, 15}, {{2, 4}, {6}, {8, 10, 12}, {14}}}};  // 8 + 3 > T + 1: cut
  for (const bool full_width : {false, true}) {
    for (const ChoiceExample& e : examples) {
      const ChoiceRows rows = choice_rows(e, model.config().T, full_width);
      int64_t needed = 0;  // the inputs of the longest sequence
      for (const std::vector<int32_t>& c : e.completions)
        needed = std::max<int64_t>(needed, (int64_t)(e.context.size() + c.size()) - 1);
      EXPECT_EQ(rows.width, full_width ? 8 : std::min<int64_t>(8, needed)) << e.index;
      EXPECT_EQ(rows.context_dropped, e.index == 2 ? 2 : 0) << e.index;
      const std::vector<float> losses = token_losses(model, Tensor::from_vector(rows.inputs, {rows.rows, rows.width}),
                                                     Tensor::from_vector(rows.targets, {rows.rows, rows.width}))
                                            .to_vector();
      std::vector<double> sums(rows.rows, 0), reference;
      for (int64_t i = 0; i < rows.rows; ++i) {
        for (int64_t t = 0; t < rows.width; ++t) sums[i] += losses[i * rows.width + t];
        reference.push_back(reference_sum(model, e.context, e.completions[i]));
        EXPECT_NEAR(sums[i], reference[i], 1e-5 * std::abs(reference[i]) + 1e-6) << "example " << e.index << " row " << i;
      }
      EXPECT_EQ(predict_choice(e, sums), predict_choice(e, reference)) << e.index;
    }
  }
  // A completion longer than the context window is refused.
  const ChoiceExample too_long{3, 0, {1}, {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {2}}};
  EXPECT_THROW(choice_rows(too_long, 8, false), InputError);
}

TEST(Choices, ThePredictionIsTheLowestMeanLossOrOnRequestTheLowestSum) {
  // Completion 0: 1 token, loss 2 (mean 2); completion 1: 4 tokens, loss 4 (mean 1).
  const ChoiceExample e{0, 1, {1}, {{1}, {1, 2, 3, 4}}};
  EXPECT_EQ(predict_choice(e, {2.0, 4.0}), 1);
  EXPECT_EQ(predict_choice(e, {2.0, 4.0}, true), 0);
  EXPECT_EQ(predict_choice(e, {4.0, 16.0}), 0);  // a tie: the first
  ChoicesScore score;
  add_choice(score, e, {2.0, 4.0}, false);
  add_choice(score, e, {1.0, 8.0}, true);
  EXPECT_EQ(score.examples, 2);
  EXPECT_EQ(score.correct, 1);
  EXPECT_EQ(score.correct_sum, 0);
  EXPECT_EQ(score.truncated, 1);
  EXPECT_DOUBLE_EQ(score.accuracy(), 0.5);
  EXPECT_DOUBLE_EQ(score.chance(), 0.5);
}

}  // namespace
}  // namespace gpumix
