// Hugging Face GPT-2 in and out: the safetensors reader and writer (every malformed input a
// clear error), GPT-2's vocab.json + merges.txt, and whole model folders against the oracle
// tests/hf/golden/ (made by tests/hf/make_hf_golden.py in plain PyTorch: logits of a fixed
// batch and GPT-2's own tokenisation of tricky strings).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "kernels/half_types.h"
#include "nn/data/bpe.h"
#include "nn/data/file_util.h"
#include "nn/gpt.h"
#include "nn/hf/gpt2.h"
#include "nn/safetensors/safetensors.h"
#include "tests/data/test_util.h"

namespace gpumix {
namespace {

namespace fs = std::filesystem;
namespace st = safetensors;
using data::read_file;
using data::Tokenizer;
using data::write_file_atomic;
using data::test::TempDir;
using json = nlohmann::json;

const std::string kGolden = GPUMIX_HF_GOLDEN_DIR;

const json& golden() {
  static const json g = json::parse(read_file(kGolden + "/golden.json"));
  return g;
}

// A safetensors file from a header text and data bytes.
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  return std::string(reinterpret_cast<const char*>(&n), 8) + header + data;
}

std::string floats(std::initializer_list<float> v) {
  return std::string(reinterpret_cast<const char*>(std::data(v)), v.size() * sizeof(float));
}

// Copies a folder's files into a fresh folder, to edit one of them.
void copy_folder(const std::string& from, const std::string& to) {
  fs::create_directories(to);
  for (const auto& e : fs::directory_iterator(from)) fs::copy_file(e.path(), fs::path(to) / e.path().filename());
}

// ---- safetensors ----------------------------------------------------------------------------

TEST(Safetensors, WritesWhatItReads) {
  TempDir dir;
  const std::vector<float> a = {1.5f, -2.25f, 3.0f, 1e-30f, -0.0f, 7.0f}, b = {0.1f, 0.2f};
  st::write(dir.file("x.safetensors"),
            {{"a", {2, 3}, [&](float* out) { std::copy(a.begin(), a.end(), out); }},
             {"empty", {0, 4}, [](float*) {}},
             {"b", {2}, [&](float* out) { std::copy(b.begin(), b.end(), out); }}},
            st::DType::F32, {{"format", "pt"}});
  const st::Reader r(dir.file("x.safetensors"));
  EXPECT_EQ(r.metadata().at("format"), "pt");
  ASSERT_EQ(r.tensors().size(), 3u);
  std::vector<float> got(6);
  r.read_f32("a", {2, 3}, got.data());
  EXPECT_EQ(std::memcmp(got.data(), a.data(), 6 * sizeof(float)), 0);
  r.read_f32("b", {2}, got.data());
  EXPECT_EQ(got[0], 0.1f);
  EXPECT_EQ(r.find("empty")->numel(), 0);
  // The data region starts 8-byte aligned, as the reference implementation pads it.
  uint64_t n = 0;
  std::memcpy(&n, read_file(dir.file("x.safetensors")).data(), 8);
  EXPECT_EQ(n % 8, 0u);
}

TEST(Safetensors, Bf16IsRoundedToNearestEven) {
  TempDir dir;
  const std::vector<float> v = {1.0f, 1.00390625f /* tie: to even, 1.0 */, 1.01171875f /* tie: up */,
                                3.14159265f, -65504.3f, 1e-40f, INFINITY};
  st::write(dir.file("h.safetensors"), {{"v", {(int64_t)v.size()}, [&](float* o) { std::copy(v.begin(), v.end(), o); }}},
            st::DType::BF16);
  const st::Reader r(dir.file("h.safetensors"));
  EXPECT_EQ(r.find("v")->dtype, st::DType::BF16);
  std::vector<float> got(v.size());
  r.read_f32("v", {(int64_t)v.size()}, got.data());
  for (size_t i = 0; i < v.size(); ++i) EXPECT_EQ(got[i], bf16_bits_to_f32(f32_to_bf16_bits(v[i]))) << i;
  EXPECT_EQ(got[1], 1.0f);
  EXPECT_EQ(got[2], 1.015625f);
}

TEST(Safetensors, ReadsF16) {
  TempDir dir;
  const uint16_t halves[] = {0x3C00, 0xC100, 0x7BFF, 0x0001, 0x7C00, 0x8000};  // 1, -2.5, 65504, 2^-24, inf, -0
  write_file_atomic(dir.file("f16.safetensors"),
                    safetensors_bytes(R"({"h":{"dtype":"F16","shape":[6],"data_offsets":[0,12]}})",
                                      std::string(reinterpret_cast<const char*>(halves), 12)));
  std::vector<float> got(6);
  st::Reader(dir.file("f16.safetensors")).read_f32("h", {6}, got.data());
  EXPECT_EQ(got, (std::vector<float>{1.0f, -2.5f, 65504.0f, std::ldexp(1.0f, -24), INFINITY, -0.0f}));
  EXPECT_TRUE(std::signbit(got[5]));
}

// Each malformed file: an error naming the file and the problem with its numbers.
TEST(Safetensors, BadFilesNameTheProblem) {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  const auto error_of = [&](const std::string& bytes) {
    write_file_atomic(path, bytes);
    return data::test::error_of([&] { st::Reader r(path); });
  };
  const auto expect = [&](const std::string& bytes, std::initializer_list<std::string> parts) {
    const std::string e = error_of(bytes);
    EXPECT_NE(e.find("bad.safetensors"), std::string::npos) << e;
    for (const auto& p : parts) EXPECT_NE(e.find(p), std::string::npos) << "message: " << e << "\nlacks: " << p;
  };
  const std::string a24 = R"("a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})";
  const std::string six = floats({1, 2, 3, 4, 5, 6});

  expect("", {"0 bytes", "too short"});
  expect("12345", {"5 bytes", "too short"});
  expect(safetensors_bytes(std::string(16, ' '), "").replace(0, 8, std::string("\x00\xc2\xeb\x0b\x00\x00\x00\x00", 8)),
         {"header length 200000000", "limit of 100000000"});
  expect(safetensors_bytes("{" + a24 + "}", six).substr(0, 30), {"runs past the end of the file", "30 bytes", "truncated"});
  expect(safetensors_bytes("{\"a\": [1, 2", ""), {"not valid JSON"});
  expect(safetensors_bytes("[1, 2]", ""), {"not an object"});
  expect(safetensors_bytes("{" + a24 + "}", six.substr(0, 20)), {"tensor 'a'", "[0, 24)", "run past the data region (20 bytes)"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})", six.substr(0, 20)),
         {"tensor 'a'", "shape [2, 3] of F32 is 24 bytes", "[0, 20) hold 20"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", floats({1})), {"tensor 'a'", "unknown dtype 'F33'"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", floats({1})), {"tensor 'a'", "'shape'", "non-negative"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4]}})", floats({1})), {"tensor 'a'", "'data_offsets'"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", floats({1})), {"tensor 'a'", "end before"});
  expect(safetensors_bytes(R"({"a":{"shape":[1],"data_offsets":[0,4]}})", floats({1})), {"tensor 'a'", "'dtype' is missing"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                           floats({1, 2, 3})),
         {"'a' [0, 8)", "'b' [4, 12)", "overlap"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
                           floats({1, 2, 3})),
         {"bytes [4, 8)", "belong to no tensor", "before 'b'"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", floats({1, 2})),
         {"data region is 8 bytes", "cover only 4"});
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                           floats({1, 2})),
         {"names tensor 'a' twice"});
  expect(safetensors_bytes(R"({"__metadata__":{"format":1}})", ""), {"__metadata__", "'format'", "string"});
  // A huge shape must not overflow into a "matching" size.
  expect(safetensors_bytes(R"({"a":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", ""),
         {"tensor 'a'", "more than 2^64 bytes"});

  // Valid files, wrong for the caller.
  write_file_atomic(path, safetensors_bytes("{" + a24 + R"(,"i":{"dtype":"I64","shape":[1],"data_offsets":[24,32]}})",
                                            six + std::string(8, '\0')));
  const st::Reader r(path);
  std::vector<float> out(6);
  EXPECT_ERROR_HAS(r.read_f32("b", {2, 3}, out.data()), "bad.safetensors", "has no tensor 'b'");
  EXPECT_ERROR_HAS(r.read_f32("a", {3, 2}, out.data()), "tensor 'a' has shape [2, 3] but [3, 2] is expected");
  EXPECT_ERROR_HAS(r.read_f32("i", {1}, out.data()), "tensor 'i' is I64", "F32, BF16 or F16");
  EXPECT_ERROR_HAS(st::Reader(dir.file("missing.safetensors")), "missing.safetensors");
}

TEST(Safetensors, FailedWriteLeavesNothing) {
  TempDir dir;
  const std::string path = dir.file("out.safetensors");
  EXPECT_ERROR_HAS(st::write(path, {{"a", {1}, [](float*) { throw std::runtime_error("source failed"); }}}, st::DType::F32),
                   "source failed");
  EXPECT_ERROR_HAS(st::write(path, {{"a", {1}, [](float*) {}}, {"a", {1}, [](float*) {}}}, st::DType::F32), "distinct");
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// ---- GPT-2's tokenizer files ----------------------------------------------------------------

const Tokenizer& golden_tokenizer() {
  static const Tokenizer tok = Tokenizer::load_gpt2(kGolden + "/vocab.json", kGolden + "/merges.txt");
  return tok;
}

TEST(Gpt2Tokenizer, EncodesExactlyAsGpt2) {
  const Tokenizer& tok = golden_tokenizer();
  EXPECT_EQ(tok.pretokenizer(), data::Pretokenizer::gpt2);
  EXPECT_TRUE(tok.ids_mapped());  // GPT-2 numbers its bytes in bytes_to_unicode order
  for (const json& t : golden()["tokenizations"]) {
    const std::string text = t["text"];
    const std::vector<int32_t> want = t["ids"];
    EXPECT_EQ(tok.encode(text), want) << "text: '" << text << "'";
    EXPECT_EQ(tok.decode(want), text);
  }
  EXPECT_EQ(tok.eot_id(), tok.vocab_size() - 1);
  EXPECT_EQ(tok.token_bytes(0), "!");  // GPT-2's id 0
}

TEST(Gpt2Tokenizer, SaveAndLoadKeepIdsAndHash) {
  TempDir dir;
  const Tokenizer& tok = golden_tokenizer();
  tok.save_gpt2(dir.file("vocab.json"), dir.file("merges.txt"));
  const Tokenizer back = Tokenizer::load_gpt2(dir.file("vocab.json"), dir.file("merges.txt"));
  EXPECT_EQ(back.hash(), tok.hash());
  EXPECT_EQ(read_file(dir.file("merges.txt")), read_file(kGolden + "/merges.txt"));
  // And through GPUMix's own format (the run folder's tokenizer.bpe).
  tok.save(dir.file("tok.bpe"));
  EXPECT_EQ(Tokenizer::load(dir.file("tok.bpe")).hash(), tok.hash());
  EXPECT_EQ(Tokenizer::load(kGolden).hash(), tok.hash());  // a folder: its vocab.json + merges.txt

  // A tokenizer trained by GPUMix keeps its own (canonical) ids.
  const Tokenizer trained = Tokenizer::train(data::test::tiny_corpus(), 400);
  trained.save_gpt2(dir.file("v2.json"), dir.file("m2.txt"));
  const Tokenizer loaded = Tokenizer::load_gpt2(dir.file("v2.json"), dir.file("m2.txt"));
  EXPECT_FALSE(loaded.ids_mapped());
  EXPECT_EQ(loaded.hash(), trained.hash());
  EXPECT_EQ(loaded.encode(data::test::tiny_corpus()), trained.encode(data::test::tiny_corpus()));
}

TEST(Gpt2Tokenizer, BadFilesNameTheLineOrToken) {
  TempDir dir;
  const std::string merges = read_file(kGolden + "/merges.txt");
  const std::string vocab = read_file(kGolden + "/vocab.json");
  const auto load = [&](const std::string& m, const std::string& v) {
    write_file_atomic(dir.file("merges.txt"), m);
    write_file_atomic(dir.file("vocab.json"), v);
    Tokenizer::load_gpt2(dir.file("vocab.json"), dir.file("merges.txt"));
  };
  EXPECT_ERROR_HAS(load(merges + "zzq qqz\n", vocab), "merges.txt", "line 162", "'zzq' is neither a byte nor made by an earlier line");
  EXPECT_ERROR_HAS(load(merges + "a n\n", vocab), "line 162", "makes 'an', which line 2 made already");
  EXPECT_ERROR_HAS(load(merges + "a b c\n", vocab), "line 162", "two tokens");
  EXPECT_ERROR_HAS(load(merges + "x y\n", vocab), "vocab.json", "lacks token 'xy' made by line 162");
  EXPECT_ERROR_HAS(load(merges, "{\"a\": 0"), "vocab.json", "not valid JSON");
  json v = json::parse(vocab);
  v["<|pad|>"] = 417;
  EXPECT_ERROR_HAS(load(merges, v.dump()), "vocab.json", "token '<|pad|>' has id 417", "0..416");
  v = json::parse(vocab);
  v.erase("<|endoftext|>");
  EXPECT_ERROR_HAS(load(merges, v.dump()), "vocab.json", "no <|endoftext|>");
  v = json::parse(vocab);
  v["an"] = v["!"];
  EXPECT_ERROR_HAS(load(merges, v.dump()), "vocab.json", "id 0 is given to two tokens");
  v = json::parse(vocab);
  v["\xe2\x82\xac"] = v["an"];  // '€' is not one of GPT-2's byte characters
  v.erase("an");
  EXPECT_ERROR_HAS(load(merges, v.dump()), "vocab.json", "token '\xe2\x82\xac'", "neither a byte");
}

// ---- whole folders -------------------------------------------------------------------------

// GPUMix's fp32 logits against the float64 reference: |got - ref| <= K eps (|ref| + mean|ref|)
// with K = 4C, the longest dot product of the model (the MLP's projection), and eps fp32's.
TEST(HfModel, ImportReproducesPyTorchLogits) {
  const hf::Gpt2Model m = hf::read_model(kGolden);
  const GPTConfig& c = m.config;
  EXPECT_EQ(c.L, 2);
  EXPECT_EQ(c.NH, 4);
  EXPECT_EQ(c.V, golden_tokenizer().vocab_size());
  GPT model(c, Device::cpu(), 0);
  std::memcpy(model.params().data<float>(), m.params.data(), m.params.size() * sizeof(float));
  const int64_t B = golden()["B"], T = golden()["T"];
  const Tensor logits = model.logits(Tensor::from_vector(golden()["tokens"].get<std::vector<int32_t>>(), {B, T}));
  const std::vector<float> got = logits.to_vector(), want = golden()["logits"].get<std::vector<float>>();
  ASSERT_EQ(got.size(), want.size());
  double mean = 0;
  for (float w : want) mean += std::fabs(w) / want.size();
  const double k_eps = 4.0 * c.C * FLT_EPSILON;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double excess = std::fabs((double)got[i] - want[i]) / (k_eps * (std::fabs(want[i]) + mean));
    if (excess > worst) worst = excess, at = i;
  }
  EXPECT_LE(worst, 1.0) << "logit " << at << " = " << got[at] << ", PyTorch " << want[at] << ": " << worst
                        << "x the allowance";
}

TEST(HfModel, ExportWritesHuggingFaceNamesAndLayoutBitwise) {
  TempDir dir;
  const hf::Gpt2Model m = hf::read_model(kGolden);
  const std::string out = dir.file("export");
  hf::write_model(out, m.config, m.params.data(), m.tokenizer, st::DType::F32);
  // Every tensor as the PyTorch oracle wrote it: the same names, shapes and bytes.
  const st::Reader ours(out + "/model.safetensors"), theirs(kGolden + "/model.safetensors");
  EXPECT_EQ(ours.metadata().at("format"), "pt");
  ASSERT_EQ(ours.tensors().size(), theirs.tensors().size());
  for (const st::TensorInfo& t : theirs.tensors()) {
    const st::TensorInfo* o = ours.find(t.name);
    ASSERT_TRUE(o) << t.name;
    EXPECT_EQ(o->shape, t.shape) << t.name;
    std::vector<float> a(t.numel()), b(t.numel());
    ours.read_f32(*o, a.data());
    theirs.read_f32(t, b.data());
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << t.name;
  }
  EXPECT_EQ(ours.find("lm_head.weight"), nullptr);  // tied, as save_pretrained leaves it out
  const json cfg = json::parse(read_file(out + "/config.json"));
  EXPECT_EQ(cfg["model_type"], "gpt2");
  EXPECT_EQ(cfg["architectures"][0], "GPT2LMHeadModel");
  EXPECT_EQ(cfg["n_embd"], 32);
  EXPECT_EQ(cfg["n_positions"], 16);
  EXPECT_EQ(cfg["vocab_size"], 417);
  EXPECT_EQ(cfg["activation_function"], "gelu_new");
  EXPECT_EQ(cfg["eos_token_id"], 416);
  EXPECT_EQ(cfg["layer_norm_epsilon"], 1e-5);

  // Export -> import: the same parameters, bit for bit, and the same tokenizer.
  const hf::Gpt2Model back = hf::read_model(out);
  EXPECT_EQ(std::memcmp(back.params.data(), m.params.data(), m.params.size() * sizeof(float)), 0);
  EXPECT_EQ(back.tokenizer.hash(), m.tokenizer.hash());
  EXPECT_EQ(read_file(out + "/merges.txt"), read_file(kGolden + "/merges.txt"));
}

TEST(HfModel, WeightsReadInPartsAsAShardedRankReadsThem) {
  const hf::Gpt2Model m = hf::read_model(kGolden);
  const hf::Weights w(kGolden, m.config);
  const int64_t P = m.config.total_params();
  // Cuts inside tensors, across tensors, inside transposed matrices, empty and whole.
  for (const auto& [offset, count] : std::vector<std::pair<int64_t, int64_t>>{
           {0, P}, {0, 0}, {5, 1}, {13000, 7777}, {P - 3, 3}, {14000, 1}, {20001, 4096}}) {
    std::vector<float> part((size_t)count, NAN);
    w.read(offset, count, part.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), m.params.begin() + offset)) << offset << " + " << count;
  }
  std::vector<float> one(1);
  EXPECT_ERROR_HAS(w.read(P, 1, one.data()), "outside the " + std::to_string(P) + " parameters");
}

TEST(HfModel, Bf16ExportIsTheRoundedFp32) {
  TempDir dir;
  const hf::Gpt2Model m = hf::read_model(kGolden);
  hf::write_model(dir.file("bf16"), m.config, m.params.data(), m.tokenizer, st::DType::BF16);
  EXPECT_EQ(json::parse(read_file(dir.file("bf16/config.json")))["torch_dtype"], "bfloat16");
  const hf::Gpt2Model back = hf::read_model(dir.file("bf16"));
  ASSERT_EQ(back.params.size(), m.params.size());
  for (size_t i = 0; i < m.params.size(); ++i)
    ASSERT_EQ(back.params[i], bf16_bits_to_f32(f32_to_bf16_bits(m.params[i]))) << "parameter " << i;
}

// Rewrites the golden weights with `edit` applied to the list of tensors.
void write_weights(const std::string& path,
                   const std::function<void(std::vector<std::pair<std::string, std::vector<float>>>&,
                                            std::map<std::string, std::vector<int64_t>>&)>& edit) {
  const st::Reader in(kGolden + "/model.safetensors");
  std::vector<std::pair<std::string, std::vector<float>>> tensors;
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const st::TensorInfo& t : in.tensors()) {
    std::vector<float> v(t.numel());
    in.read_f32(t, v.data());
    tensors.emplace_back(t.name, std::move(v));
    shapes[t.name] = t.shape;
  }
  edit(tensors, shapes);
  std::vector<st::TensorSource> sources;
  for (const auto& [name, values] : tensors) {
    const std::vector<float>* v = &values;
    sources.push_back({name, shapes[name], [v](float* out) { std::copy(v->begin(), v->end(), out); }});
  }
  st::write(path, sources, st::DType::F32);
}

TEST(HfModel, ImportsGpt2ModelNamesMaskBuffersAndATiedHead) {
  TempDir dir;
  const std::string folder = dir.file("variant");
  copy_folder(kGolden, folder);
  // The original gpt2's file: no "transformer." prefix, the causal-mask buffers, and lm_head.
  write_weights(folder + "/model.safetensors", [](auto& tensors, auto& shapes) {
    std::vector<float> wte;
    for (auto& [name, values] : tensors) {
      const std::string bare = name.substr(std::strlen("transformer."));
      shapes[bare] = shapes[name];
      if (bare == "wte.weight") wte = values;
      name = bare;
    }
    tensors.emplace_back("lm_head.weight", wte);
    shapes["lm_head.weight"] = {417, 32};
    tensors.emplace_back("h.0.attn.bias", std::vector<float>(256, 1.0f));
    shapes["h.0.attn.bias"] = {1, 1, 16, 16};
    tensors.emplace_back("h.1.attn.masked_bias", std::vector<float>{-1e4f});
    shapes["h.1.attn.masked_bias"] = {};
  });
  EXPECT_EQ(hf::read_model(folder).params, hf::read_model(kGolden).params);

  write_weights(folder + "/model.safetensors", [](auto& tensors, auto& shapes) {
    std::vector<float> head = tensors[0].second;  // sorted by name: lm_head must differ from wte
    for (auto& [name, values] : tensors)
      if (name == "transformer.wte.weight") head = values;
    head[5] += 1.0f;
    tensors.emplace_back("lm_head.weight", head);
    shapes["lm_head.weight"] = {417, 32};
  });
  EXPECT_ERROR_HAS(hf::read_model(folder), "lm_head.weight", "differs from the token embedding", "untied");

  write_weights(folder + "/model.safetensors", [](auto& tensors, auto& shapes) {
    tensors.emplace_back("score.weight", std::vector<float>(32));
    shapes["score.weight"] = {1, 32};
  });
  EXPECT_ERROR_HAS(hf::read_model(folder), "tensor 'score.weight' is not a weight of GPT2LMHeadModel");
}

TEST(HfModel, ConfigContradictingTheTensorsNamesTheField) {
  TempDir dir;
  const std::string folder = dir.file("bad");
  copy_folder(kGolden, folder);
  const json good = json::parse(read_file(kGolden + "/config.json"));
  const auto with = [&](const char* field, const json& value) {
    json c = good;
    if (value.is_discarded())
      c.erase(field);
    else
      c[field] = value;
    write_file_atomic(folder + "/config.json", c.dump());
    return folder;
  };
  EXPECT_ERROR_HAS(hf::read_model(with("n_embd", 64)), "model.safetensors", "tensor 'transformer.wte.weight' has shape [417, 32]",
                   "vocab_size = 417 and n_embd = 64", "[417, 64]");
  EXPECT_ERROR_HAS(hf::read_model(with("n_positions", 32)), "transformer.wpe.weight", "n_positions = 32", "[32, 32]");
  EXPECT_ERROR_HAS(hf::read_model(with("vocab_size", 500)), "config.json", "'vocab_size' is 500", "417 tokens");
  EXPECT_ERROR_HAS(hf::read_model(with("n_layer", 1)), "holds block 1", "n_layer is 1");
  EXPECT_ERROR_HAS(hf::read_model(with("n_layer", 3)), "has no tensor 'transformer.h.2.ln_1.weight'", "n_layer = 3");
  EXPECT_ERROR_HAS(hf::read_model(with("n_head", 5)), "'n_head'", "(5) does not divide n_embd (32)");
  EXPECT_ERROR_HAS(hf::read_model(with("n_head", json(json::value_t::discarded))), "'n_head' is missing");
  EXPECT_ERROR_HAS(hf::read_model(with("n_layer", "2")), "'n_layer' must be a positive integer");
  EXPECT_ERROR_HAS(hf::read_model(with("activation_function", "gelu")), "'activation_function' is \"gelu\"", "gelu_new");
  EXPECT_ERROR_HAS(hf::read_model(with("layer_norm_epsilon", 1e-6)), "'layer_norm_epsilon'", "1e-05");
  EXPECT_ERROR_HAS(hf::read_model(with("n_inner", 100)), "'n_inner' is 100", "128");
  EXPECT_ERROR_HAS(hf::read_model(with("model_type", "llama")), "'model_type' is \"llama\"");
  EXPECT_ERROR_HAS(hf::read_model(with("scale_attn_by_inverse_layer_idx", true)), "'scale_attn_by_inverse_layer_idx'");
  write_file_atomic(folder + "/config.json", "{not json");
  EXPECT_ERROR_HAS(hf::read_model(folder), "config.json", "not valid JSON");
  write_file_atomic(folder + "/config.json", good.dump());
  fs::remove(folder + "/merges.txt");
  EXPECT_ERROR_HAS(hf::read_model(folder), "has no merges.txt", "save_pretrained");
  EXPECT_ERROR_HAS(hf::read_model(dir.file("nothing")), "has no config.json");
}

TEST(HfModel, FailedExportWritesNothing) {
  TempDir dir;
  const hf::Gpt2Model m = hf::read_model(kGolden);
  // Into a folder that holds something: refused, the folder untouched.
  fs::create_directories(dir.file("full"));
  write_file_atomic(dir.file("full/keep.txt"), "keep");
  EXPECT_ERROR_HAS(hf::write_model(dir.file("full"), m.config, m.params.data(), m.tokenizer, st::DType::F32),
                   "exists and is not empty", "nothing was written");
  EXPECT_EQ(read_file(dir.file("full/keep.txt")), "keep");
  // A tokenizer of another vocabulary.
  EXPECT_ERROR_HAS(hf::write_model(dir.file("a"), m.config, m.params.data(), Tokenizer(), st::DType::F32),
                   "257 tokens", "417");
  // A failure after the weights were written (two tokens with the same bytes cannot be one
  // vocab.json): no folder, no temporary left.
  GPTConfig c = m.config;
  c.V = 261;
  std::vector<float> params(c.total_params(), 0.5f);
  const Tokenizer twins({{'a', 'b'}, {'b', 'c'}, {256, 'c'}, {'a', 257}});  // "abc" twice
  EXPECT_ERROR_HAS(hf::write_model(dir.file("b"), c, params.data(), twins, st::DType::F32), "hold the same bytes");
  EXPECT_FALSE(fs::exists(dir.file("a")));
  EXPECT_FALSE(fs::exists(dir.file("b")));
  size_t entries = 0;
  for (const auto& e : fs::directory_iterator(dir.path())) entries += e.path().filename() != "full";
  EXPECT_EQ(entries, 0u);
}

}  // namespace
}  // namespace gpumix
