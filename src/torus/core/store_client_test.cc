#include "torus/core/store_client.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace torus::core {
namespace store_client_test {

// Writes a value in the store's layout into `path`.
void WriteFile(const std::string& path, const ValueParts& parts) {
  StoredLayout layout = LayoutOf(parts);
  std::string bytes(layout.total, '\0');
  std::string header = EncodeHeader(layout);
  std::memcpy(bytes.data(), header.data(), header.size());
  std::memcpy(bytes.data() + layout.data.offset, parts.data.data(), parts.data.size());
  for (size_t i = 0; i < parts.buffers.size(); ++i) {
    std::memcpy(bytes.data() + layout.buffers[i].offset, parts.buffers[i].data(), parts.buffers[i].size());
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

TEST(StoredLayout, PartsStartOnSixtyFourByteBoundariesInOrder) {
  ValueParts parts{.format = "pickle5", .data = "0123456789", .buffers = {std::string_view("abc"), "", "xyz"}};
  StoredLayout layout = LayoutOf(parts);
  EXPECT_EQ(layout.format, "pickle5");
  EXPECT_EQ(layout.data.offset, 64u);  // header: 8 + 4 + 4 + 8 + 3 * 8 + 7 = 55 bytes
  EXPECT_EQ(layout.data.size, 10u);
  ASSERT_EQ(layout.buffers.size(), 3u);
  EXPECT_EQ(layout.buffers[0].offset, 128u);
  EXPECT_EQ(layout.buffers[1].offset, 192u);
  EXPECT_EQ(layout.buffers[1].size, 0u);
  EXPECT_EQ(layout.buffers[2].offset, 192u);
  EXPECT_EQ(layout.total, 256u);
  EXPECT_EQ(PartsSize(parts), 16u);
}

TEST(StoredLayout, DecodesWhatItEncodes) {
  ValueParts parts{.format = "pickle5", .data = "data", .buffers = {std::string_view("first"), "second"}};
  StoredLayout layout = LayoutOf(parts);
  std::string bytes(layout.total, '\0');
  std::string header = EncodeHeader(layout);
  std::memcpy(bytes.data(), header.data(), header.size());
  auto decoded = DecodeLayout(bytes.data(), bytes.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->format, "pickle5");
  EXPECT_EQ(decoded->data.offset, layout.data.offset);
  EXPECT_EQ(decoded->data.size, 4u);
  ASSERT_EQ(decoded->buffers.size(), 2u);
  EXPECT_EQ(decoded->buffers[1].offset, layout.buffers[1].offset);
  EXPECT_EQ(decoded->buffers[1].size, 6u);
}

TEST(StoredLayout, RefusesWhatIsNotAStoredValue) {
  ValueParts parts{.format = "pickle5", .data = std::string_view("x"), .buffers = {std::string_view("buffer")}};
  StoredLayout layout = LayoutOf(parts);
  std::string bytes(layout.total, '\0');
  std::string header = EncodeHeader(layout);
  std::memcpy(bytes.data(), header.data(), header.size());
  EXPECT_EQ(DecodeLayout("garbage!", 8).status().message(), "not a stored value: no TORUSOB1 header");
  EXPECT_EQ(DecodeLayout(bytes.data(), 12).status().message(), "not a stored value: a short header");
  // Cut before its buffer ends.
  EXPECT_EQ(DecodeLayout(bytes.data(), layout.buffers[0].offset + 3).status().message(),
            "not a stored value: a buffer runs past its end");
  // A buffer length that would wrap around.
  std::string huge = bytes;
  uint64_t len = ~uint64_t{0} - 10;
  std::memcpy(huge.data() + 24, &len, sizeof(len));
  EXPECT_EQ(DecodeLayout(huge.data(), huge.size()).status().code(), absl::StatusCode::kDataLoss);
}

TEST(MappedObject, MapsAFileReadOnlyWithItsLayout) {
  const std::string path =
      (std::filesystem::temp_directory_path() / absl::StrCat("store_client_test_", getpid())).string();
  WriteFile(path, ValueParts{.format = "pickle5", .data = "head", .buffers = {std::string_view("payload")}});
  const uint64_t size = std::filesystem::file_size(path);
  auto mapped = MappedObject::Map(path, size);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  std::filesystem::remove(path);  // a mapping outlives its file
  const StoredLayout& layout = (*mapped)->layout();
  EXPECT_EQ(std::string_view((*mapped)->data() + layout.data.offset, layout.data.size), "head");
  ASSERT_EQ(layout.buffers.size(), 1u);
  EXPECT_EQ(std::string_view((*mapped)->data() + layout.buffers[0].offset, layout.buffers[0].size), "payload");
  EXPECT_EQ(MappedObject::Map(path, size).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace store_client_test
}  // namespace torus::core
