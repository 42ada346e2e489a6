// Real TLS on loopback: HttpServer with certificates made by common/tls,
// HttpClient trusting it by pin or by CA file, and every way that must fail;
// and a streamed answer whose source fails, over HTTP and HTTPS.
#include <gtest/gtest.h>

#include <cstdlib>
#include <ctime>
#include <fstream>
#include <stdexcept>
#include <thread>

#include "api/http_client.h"
#include "common/tls.h"
#include "server/http/http_server.h"

namespace tide::server {
namespace {

struct Files {
  std::string cert, key, pin;
};

std::string TempDir() {
  char tmpl[] = "/tmp/tide-tls-XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

// A key and a self-signed certificate for 127.0.0.1, valid from `from` to
// `to` seconds around now.
Files MakeCert(const std::string& dir, const std::string& name, int64_t from = -3600,
               int64_t to = 86400) {
  auto key = tls::NewKey();
  EXPECT_TRUE(key.ok());
  int64_t now = time(nullptr);
  auto cert = tls::SelfSigned({*key, {"localhost", "127.0.0.1"}, now + from, now + to});
  EXPECT_TRUE(cert.ok()) << cert.status().ToString();
  Files f{dir + "/" + name + ".cert.pem", dir + "/" + name + ".key.pem", *tls::PinOfKey(*key)};
  std::ofstream(f.cert) << *cert;
  std::ofstream(f.key) << *key;
  return f;
}

class TlsTest : public ::testing::Test {
 protected:
  void Start(const Files* files) {
    server_ = std::make_unique<HttpServer>(
        [](const Request& r) {
          Response out;
          if (r.path == "/v1/broken-stream") {
            // What OutputsTar does when a file cannot be read mid-way.
            out.stream = [](const ChunkWriter& write) {
              write("the first half");
              throw std::runtime_error("the source failed");
            };
            return out;
          }
          out.body = "{\"path\":\"" + r.path + "\"}";
          return out;
        },
        [](const std::string&, const std::string&) { return size_t{1} << 20; });
    if (files) {
      ASSERT_TRUE(server_->EnableTls(files->cert, files->key).ok());
    }
    auto bound = server_->Listen("127.0.0.1:0");
    ASSERT_TRUE(bound.ok());
    addr_ = *bound;
    thread_ = std::thread([this] { server_->Serve(); });
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    if (thread_.joinable()) thread_.join();
  }
  Result<api::HttpResponse> Get(const std::string& scheme, const api::TlsTrust& trust,
                                const std::string& method = "GET") {
    auto c = api::HttpClient::Create(scheme + "://" + addr_, trust);
    if (!c.ok()) return c.status();
    return (*c)->Do(method, "/v1/x", "", {}, 5'000);
  }

  std::string dir_ = TempDir();
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  std::string addr_;
};

TEST_F(TlsTest, PinnedClientTalksAndAWrongPinIsRefused) {
  Files f = MakeCert(dir_, "a");
  Start(&f);
  EXPECT_TRUE(server_->tls());
  auto ok = Get("https", {"", {f.pin}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->status, 200);
  EXPECT_EQ(ok->body, "{\"path\":\"/v1/x\"}");

  std::string wrong = "sha256:" + std::string(64, '0');
  auto refused = Get("https", {"", {wrong}});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("presents " + f.pin + ", which is not a pin given"),
            std::string::npos)
      << refused.status().message();
}

TEST_F(TlsTest, WithoutPinTheCertificateMustChainToTheCaFile) {
  Files f = MakeCert(dir_, "a");
  Start(&f);
  // The system store does not know a self-signed certificate.
  auto refused = Get("https", {});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), Code::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("not trusted"), std::string::npos)
      << refused.status().message();
  EXPECT_NE(refused.status().message().find("--pin"), std::string::npos);
  // Named as the CA, it is trusted for the host it names (127.0.0.1).
  auto ok = Get("https", {f.cert, {}});
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->status, 200);
  auto bad_ca = api::HttpClient::Create("https://" + addr_, {dir_ + "/none.pem", {}});
  ASSERT_FALSE(bad_ca.ok());
  EXPECT_EQ(bad_ca.status().field(), "ca-file");
}

TEST_F(TlsTest, AnExpiredCertificateIsRefusedEvenWhenPinned) {
  Files f = MakeCert(dir_, "old", -2 * 86400, -60);
  Start(&f);
  auto pinned = Get("https", {"", {f.pin}});
  ASSERT_FALSE(pinned.ok());
  EXPECT_NE(pinned.status().message().find("expired"), std::string::npos)
      << pinned.status().message();
  auto ca = Get("https", {f.cert, {}});
  ASSERT_FALSE(ca.ok());
  EXPECT_NE(ca.status().message().find("expired"), std::string::npos) << ca.status().message();
}

TEST_F(TlsTest, PlainHttpToTheTlsPortIsToldToUseHttps) {
  Files f = MakeCert(dir_, "a");
  Start(&f);
  auto get = Get("http", {});
  ASSERT_TRUE(get.ok()) << get.status().ToString();
  EXPECT_EQ(get->status, 308);
  EXPECT_EQ(get->headers["location"], "https://" + addr_ + "/v1/x");
  EXPECT_NE(get->body.find("tls_required"), std::string::npos) << get->body;
  EXPECT_NE(get->body.find("use https://" + addr_), std::string::npos) << get->body;
  auto post = Get("http", {}, "POST");
  ASSERT_TRUE(post.ok());
  EXPECT_EQ(post->status, 400);
  // The port still serves TLS after it.
  EXPECT_TRUE(Get("https", {"", {f.pin}}).ok());
}

TEST_F(TlsTest, HttpsToAPlainServerSaysItDoesNotSpeakTls) {
  Start(nullptr);
  auto r = Get("https", {"", {"sha256:" + std::string(64, 'a')}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_NE(r.status().message().find("does not speak TLS"), std::string::npos)
      << r.status().message();
}

TEST_F(TlsTest, ReloadServesTheNewCertificateToNewConnections) {
  Files a = MakeCert(dir_, "a");
  Start(&a);
  auto kept = api::HttpClient::Create("https://" + addr_, {"", {a.pin}});
  ASSERT_TRUE(kept.ok());
  ASSERT_TRUE((*kept)->Do("GET", "/", "", {}).ok());
  // The operator replaces the files in place and the server reloads them.
  Files b = MakeCert(dir_, "b");
  std::rename(b.cert.c_str(), a.cert.c_str());
  std::rename(b.key.c_str(), a.key.c_str());
  ASSERT_TRUE(server_->ReloadTls().ok());
  EXPECT_FALSE(Get("https", {"", {a.pin}}).ok());
  EXPECT_TRUE(Get("https", {"", {b.pin}}).ok());
  // A client pinning both keys (the next one announced ahead) never notices.
  EXPECT_TRUE(Get("https", {"", {a.pin, b.pin}}).ok());
  // A kept-alive connection keeps its session.
  EXPECT_TRUE((*kept)->Do("GET", "/", "", {}).ok());
  // Bad files: refused, the current certificate stays.
  std::ofstream(a.key) << "not a key";
  EXPECT_FALSE(server_->ReloadTls().ok());
  EXPECT_TRUE(Get("https", {"", {b.pin}}).ok());
}

// A stream that fails ends without its last chunk: the client sees a
// broken answer, never one that looks whole.
TEST_F(TlsTest, AStreamWhoseSourceFailsEndsVisiblyBroken) {
  for (bool secure : {false, true}) {
    SCOPED_TRACE(secure ? "https" : "http");
    Files f = MakeCert(dir_, secure ? "s" : "p");
    Start(secure ? &f : nullptr);
    auto c = api::HttpClient::Create(std::string(secure ? "https" : "http") + "://" + addr_,
                                     secure ? api::TlsTrust{"", {f.pin}} : api::TlsTrust{});
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    std::string got;
    Status st = (*c)->Stream("/v1/broken-stream", {}, [&](std::string_view piece) {
      got.append(piece);
      return true;
    }, 5'000);
    EXPECT_FALSE(st.ok()) << "a broken stream read as complete: " << got;
    EXPECT_EQ(got.rfind("the first half", 0), 0u) << got;
    TearDown();
    server_.reset();
  }
}

TEST(TlsServer, EnableTlsNamesTheBadFile) {
  HttpServer s([](const Request&) { return Response{}; },
               [](const std::string&, const std::string&) { return size_t{0}; });
  std::string dir = TempDir();
  Files a = MakeCert(dir, "a"), b = MakeCert(dir, "b");
  Status st = s.EnableTls(dir + "/missing.pem", a.key);
  EXPECT_EQ(st.field(), "tls-cert");
  st = s.EnableTls(a.cert, b.key);
  EXPECT_EQ(st.field(), "tls-key");
  EXPECT_NE(st.message().find("does not belong"), std::string::npos) << st.message();
  EXPECT_FALSE(s.tls());
}

}  // namespace
}  // namespace tide::server
