#include "worker/loader/npy.h"

#include <cstdlib>
#include <fstream>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

std::string TempPath(const char* name) { return std::string(std::getenv("TEST_TMPDIR")) + "/" + name; }

TEST(NpyTest, RoundTrip) {
  for (Shape shape : {Shape{3, 5}, Shape{7}, Shape{2, 0}}) {
    Tensor t(shape);
    for (int64_t i = 0; i < t.numel(); ++i) t.data()[i] = 0.5f * i - 3;
    const std::string path = TempPath("a.npy");
    ASSERT_TRUE(WriteNpy(path, t).ok());
    auto back = ReadNpy(path);
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->shape(), shape);
    EXPECT_EQ(std::vector<float>(back->data(), back->data() + back->numel()),
              std::vector<float>(t.data(), t.data() + t.numel()));
  }
}

TEST(NpyTest, RejectsWrongDtypeAndTruncation) {
  const std::string path = TempPath("b.npy");
  ASSERT_TRUE(WriteNpy(path, Tensor({4, 4})).ok());
  std::string bytes;
  {
    std::ifstream in(path, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  {
    std::ofstream out(path, std::ios::binary);
    out << bytes.substr(0, bytes.size() - 4);
  }
  auto r = ReadNpy(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("needs 64 bytes"), std::string::npos) << r.status();
  std::string f8 = bytes;
  f8.replace(f8.find("<f4"), 3, "<f8");
  {
    std::ofstream out(path, std::ios::binary);
    out << f8;
  }
  EXPECT_FALSE(ReadNpy(path).ok());
  EXPECT_FALSE(ReadNpy(TempPath("missing.npy")).ok());
}

}  // namespace
}  // namespace tpserve
