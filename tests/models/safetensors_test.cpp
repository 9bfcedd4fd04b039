// Tests for models/checkpoint/safetensors.{h,cpp}: round trip of every dtype, header layout,
// and one test per malformed-input rule (each asserting the error names the file and tensor).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/checkpoint/safetensors.h"

namespace specbed {
namespace {

std::string TmpPath(const std::string& name) {
  return std::string(SPECBED_TEST_TMPDIR) + "/safetensors_test_" + name + ".safetensors";
}

// Writes an 8-byte length prefix (`header_len`, default = header.size()), the header and `data`.
void WriteRaw(const std::string& path, const std::string& header, const std::string& data = "",
              int64_t header_len = -1) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const uint64_t n = header_len < 0 ? header.size() : static_cast<uint64_t>(header_len);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header << data;
  ASSERT_TRUE(out.good());
}

// Expects Open(path) to throw, with a message containing the path and every one of `parts`.
void ExpectOpenFails(const std::string& path, const std::vector<std::string>& parts) {
  try {
    SafetensorsFile::Open(path);
    ADD_FAILURE() << "expected an error opening " << path;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    for (const auto& part : parts) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

// A header with one tensor "w" whose entry is `entry` (raw JSON text).
std::string OneTensorHeader(const std::string& entry) {
  return "{\"w\":" + entry + "}";
}

TEST(Safetensors, DtypeSizesAndNames) {
  const std::vector<std::tuple<SafetensorsDtype, const char*, size_t>> expected = {
      {SafetensorsDtype::kF64, "F64", 8}, {SafetensorsDtype::kF32, "F32", 4},
      {SafetensorsDtype::kF16, "F16", 2}, {SafetensorsDtype::kBF16, "BF16", 2},
      {SafetensorsDtype::kI64, "I64", 8}, {SafetensorsDtype::kI32, "I32", 4},
      {SafetensorsDtype::kI16, "I16", 2}, {SafetensorsDtype::kI8, "I8", 1},
      {SafetensorsDtype::kU8, "U8", 1},   {SafetensorsDtype::kBool, "BOOL", 1}};
  for (const auto& [dtype, name, size] : expected) {
    EXPECT_EQ(SafetensorsDtypeName(dtype), name);
    EXPECT_EQ(SafetensorsDtypeSize(dtype), size);
    EXPECT_EQ(ParseSafetensorsDtype(name), dtype);
  }
  try {
    ParseSafetensorsDtype("F3");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'F3'"), std::string::npos) << e.what();
  }
}

TEST(Safetensors, RoundTripEveryDtypeWithMetadata) {
  const std::vector<SafetensorsDtype> dtypes = {SafetensorsDtype::kF64, SafetensorsDtype::kF32,
                                                SafetensorsDtype::kF16, SafetensorsDtype::kBF16,
                                                SafetensorsDtype::kI64, SafetensorsDtype::kI32,
                                                SafetensorsDtype::kI16, SafetensorsDtype::kI8,
                                                SafetensorsDtype::kU8,  SafetensorsDtype::kBool};
  // Per dtype a [2, 3] tensor with distinct bytes; plus a scalar and an empty tensor. Names are
  // chosen so that alphabetical order differs from write order.
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<SafetensorsTensorView> views;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const size_t n = 6 * SafetensorsDtypeSize(dtypes[i]);
    std::vector<uint8_t> bytes(n);
    for (size_t b = 0; b < n; ++b) bytes[b] = static_cast<uint8_t>(i * 31 + b * 7 + 1);
    if (dtypes[i] == SafetensorsDtype::kBool) {
      for (size_t b = 0; b < n; ++b) bytes[b] = b % 2;
    }
    buffers.push_back(bytes);
  }
  for (size_t i = 0; i < dtypes.size(); ++i) {
    views.push_back({"z" + std::to_string(9 - i) + "_" + SafetensorsDtypeName(dtypes[i]),
                     dtypes[i],
                     {2, 3},
                     buffers[i].data(),
                     buffers[i].size()});
  }
  const float scalar = 3.5f;
  views.push_back({"scalar", SafetensorsDtype::kF32, {}, &scalar, sizeof(scalar)});
  views.push_back({"empty", SafetensorsDtype::kF32, {0, 4}, nullptr, 0});
  const std::map<std::string, std::string> metadata = {{"format", "pt"}, {"note", "x y"}};
  const std::string path = TmpPath("roundtrip");
  WriteSafetensors(path, views, metadata);

  auto file = SafetensorsFile::Open(path);
  EXPECT_EQ(file->path(), path);
  EXPECT_EQ(file->metadata(), metadata);
  ASSERT_EQ(file->entries().size(), views.size());
  // entries() are in file offset order, i.e. the order written (the empty tensor, which occupies
  // no bytes, sits at the end offset).
  for (size_t i = 0; i < views.size(); ++i) {
    const SafetensorsEntry& e = file->entries()[i];
    EXPECT_EQ(e.name, views[i].name);
    EXPECT_EQ(e.dtype, views[i].dtype);
    EXPECT_EQ(e.shape, views[i].shape);
    ASSERT_EQ(e.nbytes, views[i].nbytes);
    if (e.nbytes > 0) {
      EXPECT_EQ(std::memcmp(e.data, views[i].data, e.nbytes), 0) << e.name;
    }
    const SafetensorsEntry* found = file->Find(views[i].name);
    ASSERT_NE(found, nullptr);
    EXPECT_EQ(found->data, e.data);
  }
  EXPECT_EQ(file->Find("absent"), nullptr);
  // The data region starts 8-byte aligned (header padded with spaces).
  const uint8_t* base = file->mapping()->data();
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | base[i];
  EXPECT_EQ((8 + header_len) % 8, 0u);
  EXPECT_EQ(file->entries()[0].data, base + 8 + header_len);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good()) << "temporary file left behind";
}

TEST(Safetensors, ReadsFileWithUnpaddedHeaderAndGapBetweenTensors) {
  // Hand-written file: no padding, data for "b" first, a 2-byte gap, then "a".
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[4,6]},)"
                             R"("b":{"dtype":"I16","shape":[1],"data_offsets":[0,2]}})";
  const std::string path = TmpPath("unpadded");
  WriteRaw(path, header, std::string("\x01\x02\xff\xff\x05\x06", 6));
  auto file = SafetensorsFile::Open(path);
  ASSERT_EQ(file->entries().size(), 2u);
  EXPECT_EQ(file->entries()[0].name, "b");
  EXPECT_EQ(file->entries()[1].name, "a");
  EXPECT_EQ(file->entries()[1].data[0], 5);
  EXPECT_EQ(file->entries()[1].data[1], 6);
  EXPECT_TRUE(file->metadata().empty());
}

TEST(Safetensors, WriterRejectsWrongByteCountAndDuplicates) {
  const float data[4] = {1, 2, 3, 4};
  const std::string path = TmpPath("writer_errors");
  try {
    WriteSafetensors(path, {{"w", SafetensorsDtype::kF32, {3}, data, sizeof(data)}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_NE(msg.find("'w'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("needs 12"), std::string::npos) << msg;
  }
  try {
    WriteSafetensors(path, {{"w", SafetensorsDtype::kF32, {2}, data, 8},
                            {"w", SafetensorsDtype::kF32, {2}, data + 2, 8}});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("duplicate"), std::string::npos) << e.what();
  }
}

TEST(SafetensorsBadInput, FileShorterThanLengthPrefix) {
  const std::string path = TmpPath("short");
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "abcde";
  }
  ExpectOpenFails(path, {"shorter than the 8-byte"});
}

// One malformed-input rule: the file WriteRaw(path, header, data, header_len) writes fails to
// open with a message naming the path and every one of `parts`.
struct BadFileCase {
  std::string name;  // the test's name
  std::string file;  // its TmpPath name
  std::string header;
  std::string data;
  int64_t header_len;  // -1 = header.size()
  std::vector<std::string> parts;
};

// A rule on the one entry of OneTensorHeader: the entry has `fields` (raw JSON members), the
// data region is `data`, and the message names tensor 'w' and every one of `parts`.
BadFileCase EntryCase(const std::string& name, const std::string& file, const std::string& fields,
                      std::vector<std::string> parts, const std::string& data = "abcd") {
  parts.insert(parts.begin(), "tensor 'w'");
  return {name, file, OneTensorHeader("{" + fields + "}"), data, -1, parts};
}

std::vector<BadFileCase> BadFileCases() {
  std::vector<BadFileCase> cases = {
      {"HeaderLengthLargerThanFile",
       "header_past_end",
       "{}",
       "",
       1000,
       {"header length 1000", "larger than"}},
      {"HeaderLengthAboveSaneBound",
       "header_huge",
       "{}",
       "",
       int64_t{200} << 20,
       {"exceeds the limit"}},
      {"HeaderNotJson", "not_json", "{\"w\": [1, 2", "", -1, {"not valid JSON"}},
      {"HeaderNotAnObject", "not_object", "[1, 2]", "", -1, {"must be a JSON object", "array"}},
      {"EntryNotAnObject",
       "entry_not_object",
       OneTensorHeader("[0, 4]"),
       "abcd",
       -1,
       {"tensor 'w'", "must be an object"}},
      {"OverlappingTensors",
       "overlap",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, 'x'),
       -1,
       {"tensor 'b'", "overlaps tensor 'a'"}},
      {"MetadataValueNotAString",
       "metadata_value",
       R"({"__metadata__":{"format":"pt","step":3}})",
       "",
       -1,
       {"__metadata__", "'step' must be a string"}},
      {"MetadataNotAnObject",
       "metadata_type",
       R"({"__metadata__":["format","pt"]})",
       "",
       -1,
       {"__metadata__", "must be an object mapping strings to strings"}},
  };
  const std::vector<BadFileCase> entry_cases = {
      EntryCase("MissingDtype", "missing_dtype", R"("shape":[1],"data_offsets":[0,4])",
                {"missing \"dtype\""}),
      EntryCase("MissingShape", "missing_shape", R"("dtype":"F32","data_offsets":[0,4])",
                {"missing \"shape\""}),
      EntryCase("MissingDataOffsets", "missing_offsets", R"("dtype":"F32","shape":[1])",
                {"missing \"data_offsets\""}),
      EntryCase("DtypeNotAString", "dtype_type", R"("dtype":4,"shape":[1],"data_offsets":[0,4])",
                {"\"dtype\" must be a string"}),
      EntryCase("ShapeNotAnArray", "shape_type",
                R"("dtype":"F32","shape":"1","data_offsets":[0,4])",
                {"\"shape\" must be an array"}),
      EntryCase("ShapeWithNonIntegerDim", "shape_float",
                R"("dtype":"F32","shape":[1.5],"data_offsets":[0,4])", {"only integers"}),
      EntryCase("DataOffsetsNotIntegers", "offsets_type",
                R"("dtype":"F32","shape":[1],"data_offsets":["0","4"])", {"non-negative integers"}),
      EntryCase("UnknownDtype", "unknown_dtype",
                R"("dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4])",
                {"unknown safetensors dtype 'F8_E4M3'", "BF16"}),
      EntryCase("NegativeDimension", "negative_dim",
                R"("dtype":"F32","shape":[-1],"data_offsets":[0,4])", {"negative dimension -1"}),
      EntryCase("DataOffsetsNotAPair", "offsets_triple",
                R"("dtype":"F32","shape":[1],"data_offsets":[0,4,8])", {"must be [begin, end]"},
                "abcdefgh"),
      EntryCase("DataOffsetsBeginAfterEnd", "offsets_reversed",
                R"("dtype":"F32","shape":[1],"data_offsets":[4,0])", {"begin after end"}),
      EntryCase("DataOffsetsOutsideDataRegion", "offsets_outside",
                R"("dtype":"F32","shape":[2],"data_offsets":[0,8])",
                {"outside the data region of 4 bytes"}),
      EntryCase("ByteCountDoesNotMatchShape", "byte_count",
                R"("dtype":"F32","shape":[2,3],"data_offsets":[0,16])",
                {"hold 16 bytes", "needs 24"}, std::string(16, 'x')),
  };
  cases.insert(cases.end(), entry_cases.begin(), entry_cases.end());
  return cases;
}

class SafetensorsBadFile : public ::testing::TestWithParam<BadFileCase> {};

TEST_P(SafetensorsBadFile, OpenFailsNamingTheRule) {
  const BadFileCase& c = GetParam();
  const std::string path = TmpPath(c.file);
  WriteRaw(path, c.header, c.data, c.header_len);
  ExpectOpenFails(path, c.parts);
}

INSTANTIATE_TEST_SUITE_P(SafetensorsBadInput, SafetensorsBadFile,
                         ::testing::ValuesIn(BadFileCases()),
                         [](const ::testing::TestParamInfo<BadFileCase>& info) {
                           return info.param.name;
                         });

TEST(SafetensorsBadInput, MissingFile) {
  const std::string path = TmpPath("does_not_exist");
  std::remove(path.c_str());
  ExpectOpenFails(path, {"no such file"});
}

}  // namespace
}  // namespace specbed
