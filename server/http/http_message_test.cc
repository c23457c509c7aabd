// HttpRequest's header lookup, PercentDecode and HttpRoutes' matching, without a server.
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/http/http_message.h"
#include "server/http/http_routes.h"

namespace tpserve {
namespace {

using ::testing::HasSubstr;

TEST(HttpRequestTest, HeaderLookupIgnoresCaseAndTakesTheFirst) {
  HttpRequest request;
  request.headers = {{"Content-Type", "application/json"}, {"X-A", "1"}, {"x-a", "2"}};
  EXPECT_EQ(request.header("content-type"), "application/json");
  EXPECT_EQ(request.header("X-a"), "1");
  EXPECT_EQ(request.header("missing"), std::nullopt);
}

TEST(PercentDecodeTest, DecodesEscapesAndRejectsBadOnes) {
  std::string out;
  ASSERT_TRUE(PercentDecode("/a%20b%2Fc%e2%82%AC+", &out));
  EXPECT_EQ(out, "/a b/c\xe2\x82\xac+");  // '+' is literal in a path
  for (const char* bad : {"/%", "/%4", "/%zz", "/%g0", "/a%00b"}) {
    EXPECT_FALSE(PercentDecode(bad, &out)) << bad;
  }
}

HttpResponse Ok(const HttpRequest&) { return {}; }

TEST(HttpRoutesTest, FindsExactPathsGetServesHeadOthersGet405) {
  HttpRoutes routes;
  routes.Add("GET", "/a", Ok).Add("POST", "/a", Ok).Add("PUT", "/b", Ok);
  ASSERT_TRUE(routes.Validate().ok());
  EXPECT_NE(routes.Find("GET", "/a").handler, nullptr);
  EXPECT_NE(routes.Find("HEAD", "/a").handler, nullptr);
  EXPECT_EQ(routes.Find("HEAD", "/b").status, 405);
  const HttpRoutes::Match refused = routes.Find("DELETE", "/a");
  EXPECT_EQ(refused.handler, nullptr);
  EXPECT_EQ(refused.status, 405);
  EXPECT_EQ(refused.allow, "GET, HEAD, POST");
  EXPECT_EQ(routes.Find("get", "/a").status, 405);  // methods are case-sensitive
  EXPECT_EQ(routes.Find("GET", "/a/").status, 404);
  EXPECT_EQ(routes.Find("GET", "/").status, 404);
}

TEST(HttpRoutesTest, FallbackTakesEveryMethodOnUnknownPaths) {
  HttpRoutes routes;
  routes.Add("GET", "/a", Ok).SetFallback(Ok);
  EXPECT_NE(routes.Find("BREW", "/elsewhere").handler, nullptr);
  EXPECT_EQ(routes.Find("POST", "/a").status, 405);  // a known path keeps its methods
}

TEST(HttpRoutesTest, ValidateReportsTheFirstMistake) {
  EXPECT_THAT(HttpRoutes().Validate().message(), HasSubstr("needs a route"));
  EXPECT_THAT(HttpRoutes().Add("GET", "metrics", Ok).Validate().message(),
              HasSubstr("bad HTTP route \"GET metrics\""));
  EXPECT_FALSE(HttpRoutes().Add("G T", "/", Ok).Validate().ok());
  EXPECT_FALSE(HttpRoutes().Add("GET", "/", HttpHandler()).Validate().ok());
  EXPECT_THAT(HttpRoutes().Add("GET", "/", Ok).Add("GET", "/", Ok).Validate().message(),
              HasSubstr("added twice"));
  EXPECT_FALSE(HttpRoutes().SetFallback(HttpAsyncHandler()).Validate().ok());
}

}  // namespace
}  // namespace tpserve
