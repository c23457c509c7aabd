// What runs without a GPU: NcclOptions, NcclStatus, the id exchange of ranks other than
// 0 (no CUDA there), and Create() failing cleanly where there is no usable device. The
// collectives themselves are in nccl_comm_group_gpu_test.cc (tagged "gpu").
#include "worker/comm/nccl_comm_group.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "base/status_macros.h"
#include "gtest/gtest.h"
#include "rendezvous/store_server.h"
#include "rendezvous/tcp_store.h"

namespace tpserve {
namespace {

NcclOptions ValidOptions(int port) {
  NcclOptions options;
  options.rank = 0;
  options.size = 2;
  options.store_port = port;
  options.prefix = "test/";
  return options;
}

void ExpectInvalid(const NcclOptions& options, absl::string_view field) {
  const absl::Status s = options.Validate();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), field)) << s;
}

TEST(NcclOptionsTest, AcceptsAValidPool) { EXPECT_TRUE(ValidOptions(1234).Validate().ok()); }

TEST(NcclOptionsTest, RejectsEachBadFieldByName) {
  NcclOptions o = ValidOptions(1234);
  o.rank = 2;
  ExpectInvalid(o, "NcclOptions.rank");
  o = ValidOptions(1234);
  o.rank = -1;
  ExpectInvalid(o, "NcclOptions.rank");
  o = ValidOptions(1234);
  o.size = 0;
  ExpectInvalid(o, "NcclOptions.size");
  o = ValidOptions(1234);
  o.prefix.clear();
  ExpectInvalid(o, "NcclOptions.prefix");
  o = ValidOptions(1234);
  o.timeout = absl::ZeroDuration();
  ExpectInvalid(o, "NcclOptions.timeout");
  o = ValidOptions(1234);
  o.connect_timeout = -absl::Seconds(1);
  ExpectInvalid(o, "NcclOptions.connect_timeout");
  o = ValidOptions(1234);
  o.device = -1;
  ExpectInvalid(o, "NcclOptions.device");
  o = ValidOptions(0);
  ExpectInvalid(o, "NcclOptions.store_port");
  o = ValidOptions(1234);
  o.store_host.clear();
  ExpectInvalid(o, "NcclOptions.store_host");
}

TEST(NcclStatusTest, NamesTheCallAndNcclsText) {
  EXPECT_TRUE(NcclStatus(ncclSuccess, "x").ok());
  const absl::Status s = NcclStatus(ncclInvalidArgument, "ncclAllReduce");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StartsWith(s.message(), "ncclAllReduce: ")) << s;
  EXPECT_TRUE(absl::StrContains(s.message(), ncclGetErrorString(ncclInvalidArgument))) << s;
}

class NcclRendezvousTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<StoreServer>> server = StoreServer::Start();
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    options_ = ValidOptions(server_->port());
    options_.rank = 1;
    options_.connect_timeout = absl::Milliseconds(300);
  }

  absl::Status Publish(absl::string_view value) {
    TPSERVE_ASSIGN_OR_RETURN(
        std::unique_ptr<TcpStoreClient> store,
        TcpStoreClient::Connect("127.0.0.1", server_->port(), absl::Seconds(5)));
    return store->Set(options_.prefix + kNcclUniqueIdKey, value);
  }

  std::unique_ptr<StoreServer> server_;
  NcclOptions options_;
};

TEST_F(NcclRendezvousTest, RankOneReceivesTheIdRankZeroPublished) {
  std::string published(sizeof(ncclUniqueId::internal), '\0');
  for (size_t i = 0; i < published.size(); ++i) published[i] = static_cast<char>(i * 7 + 1);
  ASSERT_TRUE(Publish(published).ok());
  absl::StatusOr<ncclUniqueId> id =
      ExchangeNcclUniqueId(options_, absl::Now() + options_.connect_timeout);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(std::memcmp(id->internal, published.data(), published.size()), 0);
}

TEST_F(NcclRendezvousTest, IdNeverPublishedIsDeadlineExceededInTime) {
  const absl::Time start = absl::Now();
  absl::StatusOr<ncclUniqueId> id =
      ExchangeNcclUniqueId(options_, start + options_.connect_timeout);
  const absl::Duration elapsed = absl::Now() - start;
  EXPECT_EQ(id.status().code(), absl::StatusCode::kDeadlineExceeded) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "test/nccl_unique_id")) << id.status();
  EXPECT_LT(elapsed, options_.connect_timeout + absl::Seconds(1));
}

TEST_F(NcclRendezvousTest, MalformedIdIsAnErrorNamingTheKey) {
  ASSERT_TRUE(Publish("short").ok());
  absl::StatusOr<ncclUniqueId> id =
      ExchangeNcclUniqueId(options_, absl::Now() + options_.connect_timeout);
  EXPECT_EQ(id.status().code(), absl::StatusCode::kInternal) << id.status();
  EXPECT_TRUE(absl::StrContains(id.status().message(), "test/nccl_unique_id")) << id.status();
}

TEST_F(NcclRendezvousTest, StoreThatIsGoneFailsInTime) {
  server_.reset();  // Closes the listening socket: connections are refused.
  const absl::Time start = absl::Now();
  absl::StatusOr<ncclUniqueId> id =
      ExchangeNcclUniqueId(options_, start + options_.connect_timeout);
  EXPECT_FALSE(id.ok());
  EXPECT_LT(absl::Now() - start, options_.connect_timeout + absl::Seconds(1));
}

// Not tagged "gpu": on a machine without a device this is the path a misconfigured
// worker takes; with a device, an ordinal past the last one fails the same clean way.
TEST_F(NcclRendezvousTest, CreateWithoutAUsableDeviceIsAStatus) {
  int devices = 0;
  const bool have_device = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
  options_.rank = 0;
  options_.size = 1;
  options_.device = have_device ? devices : 0;
  const absl::Time start = absl::Now();
  absl::StatusOr<std::unique_ptr<NcclCommGroup>> comm =
      NcclCommGroup::Create(options_, /*stream=*/nullptr);
  ASSERT_FALSE(comm.ok());
  const absl::Status& s = comm.status();
  if (have_device) {
    EXPECT_EQ(s.code(), absl::StatusCode::kInternal) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "cudaSetDevice")) << s;
  } else {
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_TRUE(absl::StrContains(s.message(), "CUDA")) << s;
  }
  EXPECT_TRUE(absl::StartsWith(s.message(), "rank 0 of 1: ")) << s;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace tpserve
