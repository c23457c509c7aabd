#include "server/pool/control_address.h"

#include "gtest/gtest.h"

namespace tpserve {
namespace {

void ExpectStore(const std::string& control, const std::string& bind,
                 const std::string& advertised) {
  const StoreAddress a = StoreAddressFor(control);
  EXPECT_EQ(a.bind_host, bind) << control;
  EXPECT_EQ(a.advertised_host, advertised) << control;
}

// The store is reachable exactly where the control plane is, and no further.
TEST(ControlAddressTest, StoreListensWhereRanksDialIn) {
  ExpectStore("unix:/run/tpserve/control.sock", "127.0.0.1", "127.0.0.1");
  ExpectStore("unix:///tmp/c.sock", "127.0.0.1", "127.0.0.1");
  ExpectStore("127.0.0.1:7000", "127.0.0.1", "127.0.0.1");
  ExpectStore("localhost:7000", "localhost", "localhost");
  ExpectStore("[::1]:7000", "::1", "::1");
  ExpectStore("10.0.0.5:7000", "10.0.0.5", "10.0.0.5");
  ExpectStore("node-3.cluster:7000", "node-3.cluster", "node-3.cluster");
  // A wildcard: every interface, and each rank uses the host it dialled.
  ExpectStore("0.0.0.0:7000", "0.0.0.0", "");
  ExpectStore("[::]:7000", "::", "");
  ExpectStore(":7000", "0.0.0.0", "");
}

TEST(ControlAddressTest, DialAddressOfAWildcardIsLoopback) {
  EXPECT_EQ(DialAddress("0.0.0.0:0", 4242), "127.0.0.1:4242");
  EXPECT_EQ(DialAddress("unix:/x.sock", 0), "unix:/x.sock");
}

}  // namespace
}  // namespace tpserve
