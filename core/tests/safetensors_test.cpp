// safetensors files and Cases: round trips keep every bit and every metadata entry, and every
// malformed file is refused with a CaseFileError that names the file, the tensor and the problem
// (never a crash, never a partial result).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <array>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "pararnn/core/case_file.hpp"
#include "pararnn/core/random.hpp"

namespace pararnn {
namespace {

namespace fs = std::filesystem;

constexpr std::array<DType, 6> kAllDTypes{DType::f64, DType::f32, DType::f16,
                                          DType::bf16, DType::i32, DType::i64};

// A fresh folder per test, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    static std::atomic<int> counter{0};
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("pararnn-core-" + std::to_string(::getpid()) + "-" + std::to_string(counter++) + "-" +
            info->name());
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path path(const std::string& name) const { return dir_ / name; }

  // Writes a file from raw parts: the 8-byte length of `header`, `header`, then `data`.
  fs::path raw_file(const std::string& header, const std::string& data = "",
                    std::uint64_t declared_length = ~std::uint64_t{0}) {
    const std::uint64_t length = declared_length == ~std::uint64_t{0} ? header.size()
                                                                      : declared_length;
    std::string bytes(8, '\0');
    for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((length >> (8 * i)) & 0xff);
    return bytes_file(bytes + header + data);
  }
  fs::path bytes_file(const std::string& bytes) {
    const fs::path p = path("raw-" + std::to_string(files_++) + ".safetensors");
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return p;
  }

  // read_safetensors must refuse `p` with a CaseFileError whose message names the file and
  // contains every one of `parts`.
  void expect_refused(const fs::path& p, std::initializer_list<std::string> parts) {
    try {
      (void)read_safetensors(p);
      ADD_FAILURE() << p << " was accepted";
    } catch (const CaseFileError& e) {
      const std::string message = e.what();
      EXPECT_EQ(message.rfind(p.string() + ": ", 0), 0u) << message;
      for (const std::string& part : parts) {
        EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
      }
    }
  }

  fs::path dir_;
  int files_ = 0;
};

std::string read_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Values that exercise every dtype's bits: signs, zeros, fractions, extremes of the type.
Tensor sample(DType dtype, Shape shape, int salt) {
  Tensor t(dtype, std::move(shape));
  SplitMix64 rng(static_cast<std::uint64_t>(salt) * 7919u + static_cast<std::uint64_t>(dtype));
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  const auto small = [&] { return rng.below(2001) - 1000; };  // in [-1000, 1000]
  for (double& v : values) {
    v = is_floating(dtype) ? small() / 37.0 : small() * 1000003.0;
  }
  if (!values.empty() && is_floating(dtype)) values[0] = -0.0;
  return Tensor::from_values(dtype, t.shape(), values);
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

TEST_F(SafetensorsTest, RoundTripPreservesBitsAndMetadata) {
  std::map<std::string, Tensor> tensors;
  int salt = 0;
  for (DType dtype : kAllDTypes) {
    const std::string name(dtype_name(dtype));
    tensors.emplace(name + ".matrix", sample(dtype, {3, 5}, ++salt));
    tensors.emplace(name + ".cube", sample(dtype, {2, 1, 4}, ++salt));
    tensors.emplace(name + ".scalar", sample(dtype, {}, ++salt));
    tensors.emplace(name + ".empty", sample(dtype, {0, 3}, ++salt));
  }
  Tensor with_nan = Tensor::from_values(DType::bf16, {3}, std::vector<double>{NAN, INFINITY, -1e-40});
  tensors.emplace("bf16.special", with_nan);
  const std::map<std::string, std::string> metadata{
      {"cell", "gru"}, {"max_recurrent_norm", "none"}, {"note", "ünïcode \"quoted\"\n"}, {"", ""}};
  const fs::path p = path("all.safetensors");
  write_safetensors(p, tensors, metadata);
  const SafetensorsFile file = read_safetensors(p);
  EXPECT_EQ(file.metadata, metadata);
  ASSERT_EQ(file.tensors.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(file.tensors.count(name));
    EXPECT_TRUE(same_bits(file.tensors.at(name), tensor));
  }
}

TEST_F(SafetensorsTest, WrittenFileFollowsTheReferenceLayout) {
  const fs::path p = path("layout.safetensors");
  write_safetensors(p,
                    {{"b", sample(DType::f32, {2}, 1)}, {"a", sample(DType::f16, {3}, 2)}},
                    {{"cell", "lstm"}});
  const std::string bytes = read_bytes(p);
  ASSERT_GE(bytes.size(), 8u);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t{static_cast<unsigned char>(bytes[i])} << (8 * i);
  EXPECT_EQ(n % 8, 0u) << "header is padded to a multiple of 8";
  EXPECT_EQ(bytes.size(), 8 + n + 2 * 4 + 3 * 2);
  const auto header = nlohmann::json::parse(bytes.substr(8, n));
  EXPECT_EQ(header["a"]["dtype"], "F16");
  EXPECT_EQ(header["a"]["data_offsets"], nlohmann::json::array({0, 6}));  // name order
  EXPECT_EQ(header["b"]["data_offsets"], nlohmann::json::array({6, 14}));
  EXPECT_EQ(header["b"]["shape"], nlohmann::json::array({2}));
  EXPECT_EQ(header["__metadata__"]["cell"], "lstm");
  // No temporary file is left beside the result.
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_), fs::directory_iterator()), 1);
}

TEST_F(SafetensorsTest, ReadsAnUnpaddedHeaderWithGapsAndTrailingBytes) {
  // As a foreign writer might produce: no padding, metadata first, a gap, trailing bytes.
  std::string data(4 + 4 + 8 + 3, '\0');
  const float one = 1.0f;
  const std::int64_t seven = 7;
  std::memcpy(data.data(), &one, 4);
  std::memcpy(data.data() + 8, &seven, 8);
  const fs::path p = raw_file(
      R"({"__metadata__":{"k":"v"},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}})",
      data);
  const SafetensorsFile file = read_safetensors(p);
  EXPECT_EQ(file.metadata.at("k"), "v");
  EXPECT_EQ(file.tensors.at("w").load({0}), 1.0);
  EXPECT_EQ(file.tensors.at("n").load(std::span<const std::int64_t>()), 7.0);
}

TEST_F(SafetensorsTest, MissingFileIsRefused) {
  expect_refused(path("nope.safetensors"), {"cannot open"});
  expect_refused(dir_, {"directory"});
}

TEST_F(SafetensorsTest, TruncatedFileIsRefused) {
  expect_refused(bytes_file(""), {"shorter than the 8-byte header length"});
  expect_refused(bytes_file("\x10\x00\x00"), {"shorter than the 8-byte header length"});
}

TEST_F(SafetensorsTest, HeaderLengthPastEndOfFileIsRefused) {
  expect_refused(raw_file("{}", "", 1000), {"header length 1000", "past the end"});
}

TEST_F(SafetensorsTest, AbsurdHeaderLengthIsRefused) {
  expect_refused(raw_file("{}", "", std::uint64_t{1} << 62), {"absurd"});
}

TEST_F(SafetensorsTest, BadJsonHeaderIsRefused) {
  expect_refused(raw_file(R"({"x": {"dtype": "F32", )"), {"not valid JSON"});
  expect_refused(raw_file(""), {"not valid JSON"});
  expect_refused(raw_file("\xff\xfe{}"), {"not valid JSON"});
}

TEST_F(SafetensorsTest, HeaderThatIsNotAnObjectIsRefused) {
  expect_refused(raw_file("[1, 2]"), {"not an object"});
  expect_refused(raw_file(R"({"x": 3})"), {"tensor 'x'", "not a JSON object"});
}

TEST_F(SafetensorsTest, MetadataThatIsNotAStringMapIsRefused) {
  expect_refused(raw_file(R"({"__metadata__": {"n_heads": 4}})"), {"metadata 'n_heads'"});
  expect_refused(raw_file(R"({"__metadata__": ["a"]})"), {"__metadata__"});
}

TEST_F(SafetensorsTest, UnknownDtypeIsRefused) {
  expect_refused(raw_file(R"({"x": {"dtype": "F8_E4M3", "shape": [1], "data_offsets": [0, 1]}})",
                          std::string(1, '\0')),
                 {"tensor 'x'", "unsupported dtype", "F8_E4M3"});
  expect_refused(raw_file(R"({"x": {"dtype": 32, "shape": [1], "data_offsets": [0, 4]}})",
                          std::string(4, '\0')),
                 {"tensor 'x'", "dtype"});
}

TEST_F(SafetensorsTest, MissingEntryFieldIsRefused) {
  expect_refused(raw_file(R"({"x": {"shape": [1], "data_offsets": [0, 4]}})", std::string(4, '\0')),
                 {"tensor 'x'", "dtype"});
  expect_refused(raw_file(R"({"x": {"dtype": "F32", "data_offsets": [0, 4]}})", std::string(4, '\0')),
                 {"tensor 'x'", "shape"});
  expect_refused(raw_file(R"({"x": {"dtype": "F32", "shape": [1]}})", std::string(4, '\0')),
                 {"tensor 'x'", "data_offsets"});
}

TEST_F(SafetensorsTest, BadShapeIsRefused) {
  for (const char* shape : {"[-1]", "[1.5]", "\"3\"", "[[1]]", "[9223372036854775808]"}) {
    SCOPED_TRACE(shape);
    expect_refused(raw_file(std::string(R"({"x": {"dtype": "F32", "shape": )") + shape +
                            R"(, "data_offsets": [0, 4]}})",
                            std::string(4, '\0')),
                   {"tensor 'x'", "shape"});
  }
}

TEST_F(SafetensorsTest, WrongSizeForShapeIsRefused) {
  expect_refused(raw_file(R"({"w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}})",
                          std::string(24, '\0')),
                 {"tensor 'w'", "needs 24 bytes", "hold 20"});
  // A shape whose element count overflows 64 bits.
  expect_refused(
      raw_file(R"({"w": {"dtype": "F64", "shape": [4294967296, 4294967296, 16], )"
               R"("data_offsets": [0, 8]}})",
               std::string(8, '\0')),
      {"tensor 'w'", "needs too many bytes"});
}

TEST_F(SafetensorsTest, BadDataOffsetsAreRefused) {
  for (const char* offsets : {"[0]", "[0, 4, 8]", "[-4, 0]", "[0, 4.0]", "\"0,4\""}) {
    SCOPED_TRACE(offsets);
    expect_refused(raw_file(std::string(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": )") +
                                offsets + "}}",
                            std::string(8, '\0')),
                   {"tensor 'x'", "data_offsets"});
  }
  expect_refused(raw_file(R"({"x": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}})",
                          std::string(8, '\0')),
                 {"tensor 'x'", "end before they begin"});
}

TEST_F(SafetensorsTest, OverlappingOffsetsAreRefused) {
  expect_refused(raw_file(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                          R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                          std::string(12, '\0')),
                 {"tensor 'b'", "overlap tensor 'a'"});
  // Identical ranges overlap too; empty tensors between others do not.
  expect_refused(raw_file(R"({"a": {"dtype": "I32", "shape": [1], "data_offsets": [0, 4]},)"
                          R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})",
                          std::string(4, '\0')),
                 {"overlap"});
  const fs::path fine = raw_file(
      R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
      R"( "e": {"dtype": "F32", "shape": [0], "data_offsets": [4, 4]},)"
      R"( "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
      std::string(8, '\0'));
  EXPECT_EQ(read_safetensors(fine).tensors.size(), 3u);
}

TEST_F(SafetensorsTest, DataOffsetsPastEndAreRefused) {
  expect_refused(raw_file(R"({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})",
                          std::string(12, '\0')),
                 {"tensor 'x'", "past the end of the data section"});
}

TEST_F(SafetensorsTest, EveryTruncationOfAValidFileIsRefused) {
  const fs::path good = path("good.safetensors");
  write_safetensors(good, {{"x", sample(DType::f32, {2, 3, 4}, 1)}, {"a", sample(DType::bf16, {5}, 2)}},
                    {{"cell", "gru"}});
  const std::string bytes = read_bytes(good);
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    SCOPED_TRACE(n);
    const fs::path p = bytes_file(bytes.substr(0, n));
    EXPECT_THROW(read_safetensors(p), CaseFileError);
    fs::remove(p);
  }
}

TEST_F(SafetensorsTest, CorruptedHeaderBytesNeverCrash) {
  const fs::path good = path("good.safetensors");
  write_safetensors(good, {{"x", sample(DType::f32, {2, 3, 4}, 1)}, {"a", sample(DType::i64, {5}, 2)}},
                    {{"cell", "gru"}});
  const std::string bytes = read_bytes(good);
  const std::uint32_t seed = 977;
  std::printf("seed %u\n", seed);
  SplitMix64 rng(seed);
  const auto position = [&] { return rng.below(std::size_t{8 + 120 + 1}); };
  const auto byte = [&] { return rng.below(256); };
  for (int trial = 0; trial < 500; ++trial) {
    std::string corrupted = bytes;
    for (int k = 0; k < 1 + trial % 3; ++k) {
      corrupted[std::min(position(), corrupted.size() - 1)] = static_cast<char>(byte());
    }
    const fs::path p = bytes_file(corrupted);
    try {
      const SafetensorsFile file = read_safetensors(p);  // a harmless change may still parse
      for (const auto& [name, tensor] : file.tensors) EXPECT_TRUE(tensor.defined());
    } catch (const CaseFileError&) {
    }
    fs::remove(p);
  }
}

TEST_F(SafetensorsTest, FailedWriteLeavesNoFile) {
  const fs::path missing_folder = path("no/such/folder/out.safetensors");
  EXPECT_THROW(write_safetensors(missing_folder, {{"x", sample(DType::f32, {2}, 1)}}),
               CaseFileError);
  EXPECT_FALSE(fs::exists(missing_folder));
  // The target is a non-empty folder: the rename fails and the temporary file is removed.
  const fs::path occupied = path("occupied");
  fs::create_directories(occupied / "inside");
  EXPECT_THROW(write_safetensors(occupied, {{"x", sample(DType::f32, {2}, 1)}}), CaseFileError);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    left.push_back(entry.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"occupied"});
  // Undefined tensors and reserved names are refused before anything is written.
  EXPECT_THROW(write_safetensors(path("u.safetensors"), {{"x", Tensor()}}), CaseFileError);
  EXPECT_THROW(write_safetensors(path("m.safetensors"), {{"__metadata__", sample(DType::f32, {1}, 1)}}),
               CaseFileError);
  EXPECT_FALSE(fs::exists(path("u.safetensors")));
}

TEST_F(SafetensorsTest, OverwriteReplacesTheWholeFile) {
  const fs::path p = path("case.safetensors");
  write_safetensors(p, {{"x", sample(DType::f64, {100}, 1)}});
  write_safetensors(p, {{"y", sample(DType::f32, {1}, 2)}});
  const SafetensorsFile file = read_safetensors(p);
  EXPECT_EQ(file.tensors.size(), 1u);
  EXPECT_TRUE(file.tensors.count("y"));
}

// ---------------------------------------------------------------------------------- Cases

Case sample_case(DType dtype) {
  Case problem;
  problem.cell = "gru";
  problem.metadata = {{"mix", "diag"}, {"n_heads", "2"}, {"max_recurrent_norm", "1.5"}};
  problem.parameters.emplace("W_x.weight", sample(dtype, {12, 3}, 1));
  problem.parameters.emplace("W_x.bias", sample(dtype, {12}, 2));
  problem.parameters.emplace("a_z", sample(dtype, {4}, 3));
  problem.x = sample(dtype, {1, 5, 3}, 4);
  problem.h0 = sample(dtype, {2, 4}, 5);
  problem.cu_seqlens = Tensor::from_values(DType::i32, {3}, std::vector<double>{0, 2, 5});
  problem.grad_H = sample(dtype, {1, 5, 4}, 6);
  return problem;
}

TEST_F(SafetensorsTest, CaseRoundTripKeepsEveryPart) {
  for (DType dtype : {DType::f64, DType::f32, DType::f16, DType::bf16}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    const Case written = sample_case(dtype);
    const fs::path p = path(std::string(dtype_name(dtype)) + ".safetensors");
    write_case(p, written);
    const Case read = read_case(p);
    EXPECT_EQ(read.cell, "gru");
    EXPECT_EQ(read.dtype(), dtype);
    EXPECT_EQ(read.metadata.at("cell"), "gru");
    EXPECT_EQ(read.metadata.at("mix"), "diag");
    ASSERT_EQ(read.parameters.size(), 3u);
    for (const auto& [name, tensor] : written.parameters) {
      EXPECT_TRUE(same_bits(read.parameter(name), tensor)) << name;
    }
    EXPECT_TRUE(same_bits(read.x, written.x));
    ASSERT_TRUE(read.h0 && read.cu_seqlens && read.grad_H);
    EXPECT_TRUE(same_bits(*read.h0, *written.h0));
    EXPECT_TRUE(same_bits(*read.cu_seqlens, *written.cu_seqlens));
    EXPECT_TRUE(same_bits(*read.grad_H, *written.grad_H));
  }
}

TEST_F(SafetensorsTest, CaseWithoutOptionalTensorsHasNone) {
  Case problem = sample_case(DType::f32);
  problem.h0.reset();
  problem.cu_seqlens.reset();
  problem.grad_H.reset();
  write_case(path("plain.safetensors"), problem);
  const Case read = read_case(path("plain.safetensors"));
  EXPECT_FALSE(read.h0 || read.cu_seqlens || read.grad_H);
  EXPECT_THROW(read.parameter("a_r"), CaseFileError);
}

// case_from_file must refuse `file` with a CaseFileError mentioning every one of `parts`.
void expect_case_refused(const SafetensorsFile& file, std::initializer_list<std::string> parts) {
  try {
    (void)case_from_file(file, "bad.safetensors");
    ADD_FAILURE() << "case was accepted";
  } catch (const CaseFileError& e) {
    const std::string message = e.what();
    EXPECT_EQ(message.rfind("bad.safetensors: ", 0), 0u) << message;
    for (const std::string& part : parts) {
      EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
    }
  }
}

SafetensorsFile valid_file() {
  SafetensorsFile file;
  file.metadata = {{"cell", "gru"}};
  file.tensors.emplace("x", sample(DType::f32, {2, 3, 4}, 1));
  file.tensors.emplace("W_x.weight", sample(DType::f32, {12, 4}, 2));
  return file;
}

TEST(CaseFromFile, ValidFileSplitsProblemFromParameters) {
  const Case problem = case_from_file(valid_file(), "ok.safetensors");
  EXPECT_EQ(problem.cell, "gru");
  EXPECT_EQ(problem.parameters.size(), 1u);
  EXPECT_EQ(problem.x.shape(), (Shape{2, 3, 4}));
}

TEST(CaseFromFile, MissingCellIsRefused) {
  SafetensorsFile file = valid_file();
  file.metadata.clear();
  expect_case_refused(file, {"metadata 'cell' is missing"});
  file.metadata["cell"] = "";
  expect_case_refused(file, {"metadata 'cell' is empty"});
}

TEST(CaseFromFile, MissingXIsRefused) {
  SafetensorsFile file = valid_file();
  file.tensors.erase("x");
  expect_case_refused(file, {"tensor 'x' is missing"});
}

TEST(CaseFromFile, XMustBeThreeDimensionalAndFloating) {
  SafetensorsFile file = valid_file();
  file.tensors["x"] = sample(DType::f32, {3, 4}, 1);
  expect_case_refused(file, {"tensor 'x'", "3-D", "(3, 4)"});
  file.tensors["x"] = sample(DType::i32, {1, 3, 4}, 1);
  expect_case_refused(file, {"tensor 'x'", "floating", "I32"});
}

TEST(CaseFromFile, MismatchedParameterDtypeIsRefused) {
  SafetensorsFile file = valid_file();
  file.tensors["a_z"] = sample(DType::bf16, {4}, 3);
  expect_case_refused(file, {"tensor 'a_z'", "BF16", "F32"});
  file = valid_file();
  file.tensors["h0"] = sample(DType::f64, {2, 4}, 3);
  expect_case_refused(file, {"tensor 'h0'", "F64"});
  file = valid_file();
  file.tensors["grad.H"] = sample(DType::f16, {2, 3, 4}, 3);
  expect_case_refused(file, {"tensor 'grad.H'", "F16"});
}

TEST(CaseFromFile, CuSeqlensMustBeInteger) {
  SafetensorsFile file = valid_file();
  file.tensors["cu_seqlens"] = sample(DType::f32, {3}, 3);
  expect_case_refused(file, {"tensor 'cu_seqlens'", "I32 or I64"});
  file.tensors["cu_seqlens"] = sample(DType::i64, {3}, 3);
  EXPECT_TRUE(case_from_file(file, "ok.safetensors").cu_seqlens.has_value());
}

TEST(CaseMetadata, TypedAccessorsParseOrNameTheKey) {
  Case problem;
  problem.metadata = {{"n_heads", "4"}, {"beta", "0.5"}, {"eps", "1e-06"}, {"junk", "4x"}};
  EXPECT_EQ(problem.meta("n_heads"), "4");
  EXPECT_EQ(problem.meta("absent"), std::nullopt);
  EXPECT_EQ(problem.meta_int("n_heads", 1), 4);
  EXPECT_EQ(problem.meta_int("absent", 7), 7);
  EXPECT_EQ(problem.meta_double("beta", 0), 0.5);
  EXPECT_EQ(problem.meta_double("eps", 0), 1e-6);
  EXPECT_EQ(problem.meta_double("absent", 2.5), 2.5);
  try {
    (void)problem.meta_int("junk", 1);
    FAIL() << "junk was accepted";
  } catch (const ContractViolation& e) {
    EXPECT_EQ(e.argument(), "metadata 'junk'");
    EXPECT_EQ(e.value(), "4x");
  }
  EXPECT_THROW((void)problem.meta_double("junk", 1), ContractViolation);
  EXPECT_THROW((void)problem.meta_int("beta", 1), ContractViolation);
}

TEST(CaseMetadata, CapIsANumberNoneOrTheFallback) {
  Case problem;
  EXPECT_EQ(problem.meta_cap(3.0), 3.0);
  EXPECT_EQ(problem.meta_cap(std::nullopt), std::nullopt);
  for (const char* none : {"none", "None", "null"}) {
    problem.metadata["max_recurrent_norm"] = none;
    EXPECT_EQ(problem.meta_cap(3.0), std::nullopt) << none;
  }
  problem.metadata["max_recurrent_norm"] = "0.75";
  EXPECT_EQ(problem.meta_cap(std::nullopt), 0.75);
  problem.metadata["max_recurrent_norm"] = "big";
  EXPECT_THROW((void)problem.meta_cap(3.0), ContractViolation);
}

TEST_F(SafetensorsTest, WriteCaseRefusesAParameterNamedLikeTheInput) {
  Case problem = sample_case(DType::f32);
  problem.parameters.emplace("x", sample(DType::f32, {1}, 9));
  EXPECT_THROW(write_case(path("dup.safetensors"), problem), CaseFileError);
  EXPECT_FALSE(fs::exists(path("dup.safetensors")));
}

TEST_F(SafetensorsTest, PackingMayComeAsMetadata) {
  const Tensor x(DType::f32, {1, 12, 2});
  write_safetensors(path("packed.safetensors"), {{"x", x}}, {{"cell", "gru"}, {"cu_seqlens", "0,5,12"}});
  const Case problem = read_case(path("packed.safetensors"));
  ASSERT_TRUE(problem.cu_seqlens.has_value());
  EXPECT_EQ(problem.cu_seqlens->to_f64_vector(), (std::vector<double>{0, 5, 12}));
  write_safetensors(path("bad.safetensors"), {{"x", x}}, {{"cell", "gru"}, {"cu_seqlens", "0,5,x"}});
  EXPECT_THROW((void)read_case(path("bad.safetensors")), CaseFileError);
}

TEST_F(SafetensorsTest, DuplicatedHeaderKeysAreRefused) {
  const std::string data(8, '\0');
  expect_refused(raw_file(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                          R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data),
                 {"'a' twice"});
  expect_refused(raw_file(R"({"__metadata__":{"cell":"gru","cell":"lstm"}})"), {"'cell' twice"});
  expect_refused(raw_file(R"({"a":{"dtype":"F32","dtype":"F64","shape":[1],"data_offsets":[0,4]}})", data),
                 {"'dtype' twice"});
}

TEST_F(SafetensorsTest, MetadataCuSeqlensIsParsedStrictly) {
  const Tensor x(DType::f32, {1, 16, 2});
  for (const char* bad : {"0,5x,16", "0,5.9,16", "0, 5 ,16", "0,16,", ",0,16", "0,,16", "+0,16",
                          "0,99999999999999999999,16"}) {
    write_safetensors(path("bad.safetensors"), {{"x", x}}, {{"cell", "gru"}, {"cu_seqlens", bad}});
    try {
      (void)read_case(path("bad.safetensors"));
      ADD_FAILURE() << bad << " was accepted";
    } catch (const CaseFileError& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("bad.safetensors"), std::string::npos) << message;
      EXPECT_NE(message.find("metadata 'cu_seqlens'"), std::string::npos) << message;
    }
  }
}

TEST(CaseMetadata, NoneAndEmptyAreAbsentExceptTheCapsNone) {
  Case problem;
  for (const char* none : {"None", "none", "", " "}) {
    problem.metadata["n_heads"] = none;
    EXPECT_EQ(problem.meta("n_heads"), std::nullopt) << "'" << none << "'";
    EXPECT_EQ(problem.meta_int("n_heads", 3), 3) << "'" << none << "'";
  }
  problem.metadata["max_recurrent_norm"] = "None";
  EXPECT_EQ(problem.meta_cap(0.5), std::nullopt);  // Python's None: no clamp
  problem.metadata["max_recurrent_norm"] = "";
  EXPECT_EQ(problem.meta_cap(0.5), 0.5);           // absent: the cell's default
}

TEST_F(SafetensorsTest, AtomicWriteRefusesADirectoryAndLeavesNothing) {
  fs::create_directories(path("out.json"));
  EXPECT_THROW(write_file_atomically(path("out.json"), [](std::ostream& out) { out << "{}"; }), CaseFileError);
  EXPECT_THROW(check_output_path(path("out.json"), "--json"), ContractViolation);
  EXPECT_THROW(check_output_path(path("missing/out.json"), "--json"), ContractViolation);
  EXPECT_NO_THROW(check_output_path(path("fresh.json"), "--json"));
  EXPECT_THROW(write_file_atomically(path("half.json"),
                                     [](std::ostream& out) {
                                       out << "{";
                                       throw CaseFileError("the writer failed");
                                     }),
               CaseFileError);
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir_)) left.push_back(entry.path().filename().string());
  EXPECT_EQ(left, std::vector<std::string>{"out.json"});
}

}  // namespace
}  // namespace pararnn
