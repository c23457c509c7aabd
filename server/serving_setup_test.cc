#include "server/serving_setup.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace tpserve {
namespace {

namespace fs = std::filesystem;

void Touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "#!/bin/sh\n";
}

// The worker for the device: beside the server (an installed layout) first, then in
// bazel-bin's layout; each device its own binary, so a CPU install needs no CUDA worker.
TEST(WorkerBinaryTest, BesideTheServerThenTheBuildLayout) {
  const fs::path root = fs::path(std::getenv("TEST_TMPDIR")) / "layout";
  const std::string self = (root / "server" / "tpserve").string();
  Touch(self);
  EXPECT_EQ(WorkerBinaryName("cpu"), "tpserve_worker");
  EXPECT_EQ(WorkerBinaryName("cuda"), "tpserve_worker_cuda");
  absl::StatusOr<std::string> none = WorkerBinaryBeside(self, "cuda");
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(none.status().message().find("tpserve_worker_cuda"), std::string::npos);
  EXPECT_NE(none.status().message().find("--worker-binary"), std::string::npos);

  Touch(root / "worker" / "rank" / "tpserve_worker");
  Touch(root / "worker" / "rank" / "tpserve_worker_cuda");
  EXPECT_EQ(*WorkerBinaryBeside(self, "cpu"),
            fs::canonical(root / "worker" / "rank" / "tpserve_worker").string());
  EXPECT_EQ(*WorkerBinaryBeside(self, "cuda"),
            fs::canonical(root / "worker" / "rank" / "tpserve_worker_cuda").string());
  Touch(root / "server" / "tpserve_worker");
  EXPECT_EQ(*WorkerBinaryBeside(self, "cpu"),
            fs::canonical(root / "server" / "tpserve_worker").string());
  // A directory of that name is not a binary.
  fs::create_directories(root / "server" / "tpserve_worker_cuda");
  EXPECT_EQ(*WorkerBinaryBeside(self, "cuda"),
            fs::canonical(root / "worker" / "rank" / "tpserve_worker_cuda").string());
}

}  // namespace
}  // namespace tpserve
