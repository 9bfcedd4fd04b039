// Tests for models/checkpoint/safetensors.{h,cpp}: round trip of every dtype, header layout,
// and one test per malformed-input rule (each asserting the error names the file and tensor).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "harness/base/error.h"
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

TEST(SafetensorsBadInput, HeaderLengthLargerThanFile) {
  const std::string path = TmpPath("header_past_end");
  WriteRaw(path, "{}", "", 1000);
  ExpectOpenFails(path, {"header length 1000", "larger than"});
}

TEST(SafetensorsBadInput, HeaderLengthAboveSaneBound) {
  const std::string path = TmpPath("header_huge");
  WriteRaw(path, "{}", "", int64_t{200} << 20);
  ExpectOpenFails(path, {"exceeds the limit"});
}

TEST(SafetensorsBadInput, HeaderNotJson) {
  const std::string path = TmpPath("not_json");
  WriteRaw(path, "{\"w\": [1, 2");
  ExpectOpenFails(path, {"not valid JSON"});
}

TEST(SafetensorsBadInput, HeaderNotAnObject) {
  const std::string path = TmpPath("not_object");
  WriteRaw(path, "[1, 2]");
  ExpectOpenFails(path, {"must be a JSON object", "array"});
}

TEST(SafetensorsBadInput, EntryNotAnObject) {
  const std::string path = TmpPath("entry_not_object");
  WriteRaw(path, OneTensorHeader("[0, 4]"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "must be an object"});
}

TEST(SafetensorsBadInput, MissingDtype) {
  const std::string path = TmpPath("missing_dtype");
  WriteRaw(path, OneTensorHeader(R"({"shape":[1],"data_offsets":[0,4]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "missing \"dtype\""});
}

TEST(SafetensorsBadInput, MissingShape) {
  const std::string path = TmpPath("missing_shape");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","data_offsets":[0,4]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "missing \"shape\""});
}

TEST(SafetensorsBadInput, MissingDataOffsets) {
  const std::string path = TmpPath("missing_offsets");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[1]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "missing \"data_offsets\""});
}

TEST(SafetensorsBadInput, DtypeNotAString) {
  const std::string path = TmpPath("dtype_type");
  WriteRaw(path, OneTensorHeader(R"({"dtype":4,"shape":[1],"data_offsets":[0,4]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "\"dtype\" must be a string"});
}

TEST(SafetensorsBadInput, ShapeNotAnArray) {
  const std::string path = TmpPath("shape_type");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "\"shape\" must be an array"});
}

TEST(SafetensorsBadInput, ShapeWithNonIntegerDim) {
  const std::string path = TmpPath("shape_float");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[1.5],"data_offsets":[0,4]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "only integers"});
}

TEST(SafetensorsBadInput, DataOffsetsNotIntegers) {
  const std::string path = TmpPath("offsets_type");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[1],"data_offsets":["0","4"]})"),
           "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "non-negative integers"});
}

TEST(SafetensorsBadInput, UnknownDtype) {
  const std::string path = TmpPath("unknown_dtype");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F8_E4M3","shape":[4],"data_offsets":[0,4]})"),
           "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "unknown safetensors dtype 'F8_E4M3'", "BF16"});
}

TEST(SafetensorsBadInput, NegativeDimension) {
  const std::string path = TmpPath("negative_dim");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[-1],"data_offsets":[0,4]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "negative dimension -1"});
}

TEST(SafetensorsBadInput, DataOffsetsNotAPair) {
  const std::string path = TmpPath("offsets_triple");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[1],"data_offsets":[0,4,8]})"),
           "abcdefgh");
  ExpectOpenFails(path, {"tensor 'w'", "must be [begin, end]"});
}

TEST(SafetensorsBadInput, DataOffsetsBeginAfterEnd) {
  const std::string path = TmpPath("offsets_reversed");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[1],"data_offsets":[4,0]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "begin after end"});
}

TEST(SafetensorsBadInput, DataOffsetsOutsideDataRegion) {
  const std::string path = TmpPath("offsets_outside");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})"), "abcd");
  ExpectOpenFails(path, {"tensor 'w'", "outside the data region of 4 bytes"});
}

TEST(SafetensorsBadInput, ByteCountDoesNotMatchShape) {
  const std::string path = TmpPath("byte_count");
  WriteRaw(path, OneTensorHeader(R"({"dtype":"F32","shape":[2,3],"data_offsets":[0,16]})"),
           std::string(16, 'x'));
  ExpectOpenFails(path, {"tensor 'w'", "hold 16 bytes", "needs 24"});
}

TEST(SafetensorsBadInput, OverlappingTensors) {
  const std::string path = TmpPath("overlap");
  WriteRaw(path,
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
           R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
           std::string(12, 'x'));
  ExpectOpenFails(path, {"tensor 'b'", "overlaps tensor 'a'"});
}

TEST(SafetensorsBadInput, MetadataValueNotAString) {
  const std::string path = TmpPath("metadata_value");
  WriteRaw(path, R"({"__metadata__":{"format":"pt","step":3}})");
  ExpectOpenFails(path, {"__metadata__", "'step' must be a string"});
}

TEST(SafetensorsBadInput, MetadataNotAnObject) {
  const std::string path = TmpPath("metadata_type");
  WriteRaw(path, R"({"__metadata__":["format","pt"]})");
  ExpectOpenFails(path, {"__metadata__", "must be an object mapping strings to strings"});
}

TEST(SafetensorsBadInput, MissingFile) {
  const std::string path = TmpPath("does_not_exist");
  std::remove(path.c_str());
  ExpectOpenFails(path, {"no such file"});
}

}  // namespace
}  // namespace specbed
