// The web console's side of the server, as curl sees it: its pages and
// files with their security headers, logging in for a cookie (and the
// CSRF token every change with it needs), one-time login links, sessions
// that end with their token, the job list's comma-separated filters, and
// the live events a page follows. The pages themselves run in a real
// browser in tests/browser/.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "tests/e2e/harness.h"

namespace tide::e2e {
namespace {

using nlohmann::json;

struct Http {
  int status = 0;
  std::map<std::string, std::string> headers;  // lowercase names
  std::string body;
};

class ConsoleTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_.StartServer();
    cluster_.StartAgent("a1", "2xRTX4090:24GB");
    alice_ = cluster_.NewUser("alice");
    jar_ = cluster_.dir() + "/cookies.txt";
  }

  // One request with curl: `args` are curl's (headers, -d, -b/-c).
  Http Curl(const std::string& method, const std::string& path, const std::string& args = "") {
    std::string line = cluster_.curl() + " -i -X " + method + " " + args + " '" + cluster_.url() +
                       path + "'";
    std::string out = Shell(line);
    Http h;
    // Status line and headers, then the body after the blank line.
    size_t end = out.find("\r\n\r\n");
    std::string head = out.substr(0, end);
    h.body = end == std::string::npos ? "" : out.substr(end + 4);
    std::istringstream lines(head);
    std::string l;
    std::getline(lines, l);
    if (l.size() > 9) h.status = std::atoi(l.c_str() + 9);
    while (std::getline(lines, l)) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      size_t colon = l.find(':');
      if (colon == std::string::npos) continue;
      std::string name = l.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      h.headers[name] = l.substr(colon + 2);
    }
    return h;
  }

  // Logs in with `token`, keeping the cookie in the jar; returns the answer.
  json Login(const std::string& token) {
    Http h = Curl("POST", "/v1/session",
                  "-c " + jar_ + " -H 'Content-Type: application/json' -d '{\"token\":\"" + token + "\"}'");
    EXPECT_EQ(h.status, 201) << h.body;
    return json::parse(h.body, nullptr, false);
  }

  std::string WithJar() const { return "-b " + jar_ + " -c " + jar_; }

  // The session's secret as the jar holds it.
  std::string CookieSecret() const {
    std::ifstream in(jar_);
    std::string line;
    while (std::getline(in, line)) {
      if (line.find("tide_session\t") == std::string::npos) continue;
      return line.substr(line.rfind('\t') + 1);
    }
    return "";
  }

  Cluster cluster_;
  std::string alice_;
  std::string jar_;
};

TEST_F(ConsoleTest, ThePagesAndFilesComeWithAStrictPolicy) {
  Http index = Curl("GET", "/");
  ASSERT_EQ(index.status, 200) << index.body;
  EXPECT_EQ(index.headers["content-type"].rfind("text/html", 0), 0u);
  EXPECT_NE(index.headers["content-security-policy"].find("script-src 'self'"), std::string::npos);
  EXPECT_NE(index.headers["content-security-policy"].find("frame-ancestors 'none'"),
            std::string::npos);
  EXPECT_EQ(index.headers["x-content-type-options"], "nosniff");
  EXPECT_EQ(index.headers["cache-control"], "no-cache");
  // No inline script: every script is a file of the build.
  EXPECT_EQ(index.body.find("<script>"), std::string::npos) << index.body;
  size_t src = index.body.find("src=\"/assets/");
  ASSERT_NE(src, std::string::npos) << index.body;
  std::string script = index.body.substr(src + 5, index.body.find('"', src + 5) - src - 5);
  Http js = Curl("GET", script);
  EXPECT_EQ(js.status, 200) << script;
  EXPECT_EQ(js.headers["content-type"].rfind("text/javascript", 0), 0u);
  EXPECT_NE(js.headers["cache-control"].find("immutable"), std::string::npos);
  // Every page of the console is the same page; anything else is not found.
  for (const char* page : {"/jobs", "/jobs/j-0123456789ab", "/new", "/account", "/operator"}) {
    Http h = Curl("GET", page);
    EXPECT_EQ(h.status, 200) << page;
    EXPECT_EQ(h.body, index.body) << page;
  }
  EXPECT_EQ(Curl("GET", "/jobs/j-1/logs").status, 404);
  EXPECT_EQ(Curl("GET", "/assets/nothing.js").status, 404);
  EXPECT_EQ(Curl("POST", "/jobs").status, 404);
  // The API's answers carry the same guards.
  EXPECT_EQ(Curl("GET", "/healthz").headers["x-content-type-options"], "nosniff");
}

TEST_F(ConsoleTest, ALoginIsACookieAndEveryChangeWithItNeedsItsCsrf) {
  json session = Login(alice_);
  EXPECT_EQ(session.value("user", ""), "alice");
  EXPECT_EQ(session.value("kind", ""), "user");
  EXPECT_EQ(session.value("scope", ""), "full");
  std::string csrf = session.value("csrf", "");
  ASSERT_EQ(csrf.size(), 32u) << session.dump();

  Http who = Curl("GET", "/v1/session", WithJar());
  ASSERT_EQ(who.status, 200) << who.body;
  EXPECT_EQ(json::parse(who.body).value("csrf", ""), csrf);
  EXPECT_EQ(json::parse(who.body).value("user", ""), "alice");

  const std::string spec =
      " -H 'Content-Type: application/json' -d '{\"command\":[\"true\"],\"resources\":{\"gpu_count\":1}}'";
  Http no_csrf = Curl("POST", "/v1/jobs", WithJar() + spec);
  EXPECT_EQ(no_csrf.status, 403) << no_csrf.body;
  EXPECT_NE(no_csrf.body.find("X-Tide-CSRF"), std::string::npos) << no_csrf.body;
  Http wrong = Curl("POST", "/v1/jobs", WithJar() + " -H 'X-Tide-CSRF: 0123'" + spec);
  EXPECT_EQ(wrong.status, 403) << wrong.body;
  Http ok = Curl("POST", "/v1/jobs", WithJar() + " -H 'X-Tide-CSRF: " + csrf + "'" + spec);
  EXPECT_EQ(ok.status, 201) << ok.body;
  // A request a browser says came from another site never acts.
  Http cross = Curl("GET", "/v1/jobs", WithJar() + " -H 'Sec-Fetch-Site: cross-site'");
  EXPECT_EQ(cross.status, 403) << cross.body;
  EXPECT_EQ(Curl("GET", "/v1/jobs", WithJar() + " -H 'Sec-Fetch-Site: same-origin'").status, 200);

  // The secret works only as the cookie; a token does not work as one.
  std::string secret = CookieSecret();
  ASSERT_EQ(secret.rfind("tide_s_", 0), 0u) << secret;
  EXPECT_EQ(Curl("GET", "/v1/jobs", "-H 'Authorization: Bearer " + secret + "'").status, 401);
  std::string cookie_name = cluster_.tls() ? "__Host-tide_session" : "tide_session";
  EXPECT_EQ(Curl("GET", "/v1/jobs", "-H 'Cookie: " + cookie_name + "=" + alice_ + "'").status, 401);

  // Logging out ends it.
  Http out = Curl("DELETE", "/v1/session", WithJar() + " -H 'X-Tide-CSRF: " + csrf + "'");
  EXPECT_EQ(out.status, 200) << out.body;
  EXPECT_EQ(Curl("GET", "/v1/session", "-H 'Cookie: " + cookie_name + "=" + secret + "'").status,
            401);
}

TEST_F(ConsoleTest, AnOpenEventStreamEndsAtLogout) {
  json session = Login(alice_);
  const std::string out = cluster_.dir() + "/events.txt";
  std::string rc;
  std::thread stream([&] {
    rc = Shell(cluster_.curl() + " -N --max-time 60 -o " + out + " -b " + jar_ + " '" +
                  cluster_.url() + "/v1/events'; echo rc=$?");
  });
  // Once the stream has begun, log out: the server ends it.
  EXPECT_TRUE(Eventually([&] { return ReadAll(out).find("retry: 2000") != std::string::npos; },
                         std::chrono::seconds(30)));
  Http bye = Curl("DELETE", "/v1/session", WithJar() + " -H 'X-Tide-CSRF: " +
                                               session.value("csrf", "") + "'");
  EXPECT_EQ(bye.status, 200) << bye.body;
  stream.join();
  EXPECT_EQ(rc, "rc=0\n") << "curl ended by the server, not by its own 60 s: " << ReadAll(out);
}

TEST_F(ConsoleTest, ATokenKeepsItsNewestSessions) {
  Login(alice_);
  std::string first = CookieSecret();
  std::string cookie_name = cluster_.tls() ? "__Host-tide_session" : "tide_session";
  EXPECT_EQ(Curl("GET", "/v1/session", "-H 'Cookie: " + cookie_name + "=" + first + "'").status, 200);
  for (int i = 0; i < 16; ++i) Login(alice_);
  EXPECT_EQ(Curl("GET", "/v1/session", "-H 'Cookie: " + cookie_name + "=" + first + "'").status, 401)
      << "the 17th login ended the oldest session";
  EXPECT_EQ(Curl("GET", "/v1/session", WithJar()).status, 200);
}

TEST_F(ConsoleTest, TheCookieIsHttpOnlyStrictAndSecureOverTls) {
  Http h = Curl("POST", "/v1/session",
                "-H 'Content-Type: application/json' -d '{\"token\":\"" + alice_ + "\"}'");
  ASSERT_EQ(h.status, 201) << h.body;
  std::string cookie = h.headers["set-cookie"];
  EXPECT_NE(cookie.find("HttpOnly"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("SameSite=Strict"), std::string::npos) << cookie;
  EXPECT_NE(cookie.find("Path=/"), std::string::npos) << cookie;
  EXPECT_EQ(cookie.find("Secure") != std::string::npos, cluster_.tls()) << cookie;
  EXPECT_EQ(cookie.rfind(cluster_.tls() ? "__Host-tide_session=" : "tide_session=", 0), 0u) << cookie;
  EXPECT_EQ(h.headers["cache-control"], "no-store");
}

TEST_F(ConsoleTest, ABadLoginSaysWhyAndMakesNothing) {
  Http bad = Curl("POST", "/v1/session",
                  "-H 'Content-Type: application/json' -d '{\"token\":\"tide_u_nothing\"}'");
  EXPECT_EQ(bad.status, 401) << bad.body;
  EXPECT_EQ(bad.headers.count("set-cookie"), 0u);
  // A form (what another site's page could post) is refused.
  Http form = Curl("POST", "/v1/session", "-d 'token=" + alice_ + "'");
  EXPECT_EQ(form.status, 400) << form.body;
  EXPECT_EQ(json::parse(form.body)["error"].value("field", ""), "body") << form.body;
  // Only the JSON media type: a form's text/plain never passes.
  Http sneaky = Curl("POST", "/v1/session",
                     "-H 'Content-Type: text/plain; x=application/json' -d '{\"token\":\"" + alice_ + "\"}'");
  EXPECT_EQ(sneaky.status, 400) << sneaky.body;
  Http unknown = Curl("POST", "/v1/session",
                      "-H 'Content-Type: application/json' -d '{\"token\":\"" + alice_ +
                          "\",\"remember\":true}'");
  EXPECT_EQ(unknown.status, 400) << unknown.body;
  EXPECT_EQ(json::parse(unknown.body)["error"].value("field", ""), "remember") << unknown.body;
  std::string join = cluster_.admin().CreateJoinToken()->token;
  Http agent = Curl("POST", "/v1/session",
                    "-H 'Content-Type: application/json' -d '{\"token\":\"" + join + "\"}'");
  EXPECT_EQ(agent.status, 403) << agent.body;
}

TEST_F(ConsoleTest, ASessionHasItsTokensScopeAndEndsWithIt) {
  auto alice = cluster_.ClientFor(alice_);
  auto reader = alice->Call("POST", "/v1/tokens", json{{"name", "look"}, {"scope", "read"}});
  ASSERT_TRUE(reader.ok()) << reader.status().ToString();
  json session = Login((*reader)["token"]);
  EXPECT_EQ(session.value("scope", ""), "read");
  std::string csrf = session.value("csrf", "");
  Http submit = Curl("POST", "/v1/jobs",
                     WithJar() + " -H 'X-Tide-CSRF: " + csrf +
                         "' -H 'Content-Type: application/json' -d '{\"command\":[\"true\"]}'");
  EXPECT_EQ(submit.status, 403) << submit.body;
  EXPECT_EQ(Curl("GET", "/v1/jobs", WithJar()).status, 200);
  // Revoking the token ends the sessions made from it, at once.
  ASSERT_TRUE(alice->Call("DELETE", "/v1/tokens/look").ok());
  EXPECT_EQ(Curl("GET", "/v1/jobs", WithJar()).status, 401);
}

TEST_F(ConsoleTest, TheOperatorEndsOneSessionByItsId) {
  Login(alice_);
  EXPECT_EQ(Curl("GET", "/v1/jobs", WithJar()).status, 200);
  // The audit log names the session; revoking that id ends it, not the token.
  auto audit = cluster_.admin().Call("GET", "/v1/admin/audit");
  ASSERT_TRUE(audit.ok());
  std::string session;
  for (const json& e : (*audit)["entries"]) {
    if (e["action"] == "session.create") session = e["target"];
  }
  ASSERT_EQ(session.rfind("st-", 0), 0u) << audit->dump();
  auto revoked = cluster_.admin().Call("DELETE", "/v1/admin/tokens/" + session);
  ASSERT_TRUE(revoked.ok()) << revoked.status().ToString();
  EXPECT_EQ(Curl("GET", "/v1/jobs", WithJar()).status, 401);
  EXPECT_TRUE(cluster_.ClientFor(alice_)->Call("GET", "/v1/jobs").ok());
  // Another kind of id is no token of a user's.
  EXPECT_FALSE(cluster_.admin().Call("DELETE", "/v1/admin/tokens/jt-000000000000").ok());
}

TEST_F(ConsoleTest, AUserSeesTheirSessionsAndEndsOneLeftOpenElsewhere) {
  json mine = Login(alice_);
  const std::string jar = jar_;
  jar_ = cluster_.dir() + "/other-browser.txt";
  Login(alice_);
  const std::string other_browser = WithJar();
  jar_ = jar;
  Http listed = Curl("GET", "/v1/sessions", WithJar());
  ASSERT_EQ(listed.status, 200) << listed.body;
  json sessions = json::parse(listed.body)["sessions"];
  ASSERT_EQ(sessions.size(), 2u) << listed.body;
  std::string other;
  for (const json& s : sessions) {
    EXPECT_EQ(s["scope"], "full");
    EXPECT_EQ(s["token"].get<std::string>().rfind("ut-", 0), 0u) << s.dump();
    EXPECT_GT(s["expires_at"].get<int64_t>(), s["created_at"].get<int64_t>());
    if (!s["current"].get<bool>()) other = s["id"];
  }
  ASSERT_EQ(other.rfind("st-", 0), 0u) << listed.body;
  // Bob can neither see nor end alice's.
  const std::string bob = "-H 'Authorization: Bearer " + cluster_.NewUser("bob") + "'";
  EXPECT_EQ(json::parse(Curl("GET", "/v1/sessions", bob).body)["sessions"].size(), 0u);
  EXPECT_EQ(Curl("DELETE", "/v1/sessions/" + other, bob).status, 404);
  // The CLI lists them, and ends one by its id.
  CliResult ls = cluster_.Cli({"token", "sessions"}, alice_);
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find(other), std::string::npos) << ls.out;
  CliResult end = cluster_.Cli({"token", "revoke", other}, alice_);
  EXPECT_EQ(end.exit_code, 0) << end.err;
  EXPECT_NE(end.out.find("Session " + other + " ended"), std::string::npos) << end.out;
  EXPECT_EQ(Curl("GET", "/v1/jobs", other_browser).status, 401);
  EXPECT_EQ(Curl("GET", "/v1/jobs", WithJar()).status, 200);
  // Ended is gone: a second end is not found, and names it.
  CliResult again = cluster_.Cli({"token", "revoke", other}, alice_);
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("no session " + other), std::string::npos) << again.err;
  // From the console, with its CSRF token.
  Http listed_now = Curl("GET", "/v1/sessions", WithJar());
  EXPECT_EQ(json::parse(listed_now.body)["sessions"].size(), 1u) << listed_now.body;
  EXPECT_EQ(Curl("DELETE", "/v1/sessions/" + other, WithJar()).status, 403);  // no CSRF token
  EXPECT_EQ(Curl("DELETE", "/v1/sessions/st-000000000000",
                 WithJar() + " -H 'X-Tide-CSRF: " + mine.value("csrf", "") + "'")
                .status,
            404);
}

TEST_F(ConsoleTest, ALoginLinkWorksOnce) {
  auto link = cluster_.admin().Call("POST", "/v1/admin/login-links", json{{"user", "alice"}});
  ASSERT_TRUE(link.ok()) << link.status().ToString();
  std::string path = (*link)["path"];
  ASSERT_EQ(path.rfind("/login?code=tide_l_", 0), 0u) << path;
  Http first = Curl("GET", path, "-c " + jar_);
  EXPECT_EQ(first.status, 303);
  EXPECT_EQ(first.headers["location"], "/jobs");
  Http who = Curl("GET", "/v1/session", WithJar());
  ASSERT_EQ(who.status, 200) << who.body;
  EXPECT_EQ(json::parse(who.body).value("user", ""), "alice");
  Http again = Curl("GET", path);
  EXPECT_EQ(again.status, 303);
  EXPECT_EQ(again.headers["location"], "/login?error=link");
  if (cluster_.tls()) {
    // A link sent in clear to the HTTPS port is sent on without its code.
    auto fresh = cluster_.admin().Call("POST", "/v1/admin/login-links", json{{"user", "alice"}});
    ASSERT_TRUE(fresh.ok());
    std::string plain = "http" + cluster_.url().substr(5);
    std::string where = Shell("curl -s -o /dev/null -w '%{redirect_url}' '" + plain +
                                 (*fresh)["path"].get<std::string>() + "'");
    EXPECT_EQ(where, cluster_.url() + "/login");
  }
  EXPECT_EQ(again.headers.count("set-cookie"), 0u);
  // Only the operator makes them, and for users that exist.
  auto alice = cluster_.ClientFor(alice_);
  EXPECT_EQ(alice->Call("POST", "/v1/admin/login-links", json{{"user", "alice"}}).status().code(),
            Code::kPermissionDenied);
  auto nobody = cluster_.admin().Call("POST", "/v1/admin/login-links", json{{"user", "nobody"}});
  EXPECT_EQ(nobody.status().field(), "user") << nobody.status().ToString();
}

TEST_F(ConsoleTest, TheJobListTakesCommaSeparatedFilters) {
  auto alice = cluster_.ClientFor(alice_);
  auto submit = [&](const std::string& name, const std::string& tag, int gpus,
                    const std::string& type) {
    json spec = {{"name", name},
                 {"command", {"sleep", "30"}},
                 {"tags", {tag}},
                 {"resources", {{"gpu_count", gpus}, {"gpu_type", type}}}};
    auto j = alice->Call("POST", "/v1/jobs", spec);
    EXPECT_TRUE(j.ok()) << j.status().ToString();
    return j.ok() ? (*j)["id"].get<std::string>() : "";
  };
  std::string runs = submit("train-small", "a", 1, "RTX4090");
  std::string waits = submit("train-huge", "b", 8, "RTX4090");  // no node has 8
  std::string other = submit("eval", "c", 1, "H100");           // no node has H100
  auto ids = [&](const std::string& query) {
    auto page = alice->Call("GET", "/v1/jobs?" + query);
    EXPECT_TRUE(page.ok()) << query << ": " << page.status().ToString();
    std::set<std::string> out;
    if (page.ok()) {
      for (auto& j : (*page)["jobs"]) out.insert(j["id"].get<std::string>());
    }
    return out;
  };
  EXPECT_EQ(ids("status=queued,starting,running"), (std::set<std::string>{runs, waits, other}));
  EXPECT_EQ(ids("tag=a,c"), (std::set<std::string>{runs, other}));
  EXPECT_EQ(ids("gpu_type=H100"), (std::set<std::string>{other}));
  EXPECT_EQ(ids("q=TRAIN"), (std::set<std::string>{runs, waits}));
  EXPECT_EQ(ids("q=" + other.substr(2, 6)), (std::set<std::string>{other}));
  auto page = alice->Call("GET", "/v1/jobs?limit=1&total=true");
  ASSERT_TRUE(page.ok());
  EXPECT_EQ((*page)["total"], 3);
  auto second = alice->Call("GET", "/v1/jobs?limit=1&total=true&after=" + (*page)["next"].get<std::string>());
  ASSERT_TRUE(second.ok());
  EXPECT_EQ((*second)["total"], 3) << "the total counts every page";
  EXPECT_EQ((*second)["jobs"].size(), 1u);
  auto bad = alice->Call("GET", "/v1/jobs?status=queued,sleeping");
  EXPECT_EQ(bad.status().field(), "status") << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("sleeping"), std::string::npos);
  EXPECT_EQ(alice->Call("GET", "/v1/jobs?tag=a,").status().field(), "tag");
  EXPECT_EQ(alice->Call("GET", "/v1/jobs?total=yes").status().field(), "total");
}

TEST_F(ConsoleTest, EventsCarryEachChangeOfTheCallersJobs) {
  const std::string auth = "-H 'Authorization: Bearer " + alice_ + "'";
  // The stream says where it starts; a reconnect from there misses nothing.
  std::string head = Shell(cluster_.curl() + " -N --max-time 2 " + auth + " '" +
                              cluster_.url() + "/v1/events'");
  size_t id_at = head.find("id: ");
  ASSERT_NE(id_at, std::string::npos) << head;
  std::string start = head.substr(id_at + 4, head.find('\n', id_at) - id_at - 4);
  auto alice = cluster_.ClientFor(alice_);
  auto job = alice->Call("POST", "/v1/jobs", json{{"command", {"true"}}});
  ASSERT_TRUE(job.ok());
  std::string id = (*job)["id"];
  // Bob's job is not alice's to see.
  auto bob = cluster_.ClientFor(cluster_.NewUser("bob"));
  auto bobs = bob->Call("POST", "/v1/jobs", json{{"command", {"true"}}});
  ASSERT_TRUE(bobs.ok());
  std::string events = Shell(cluster_.curl() + " -N --max-time 3 " + auth + " -H 'Last-Event-ID: " +
                                start + "' '" + cluster_.url() + "/v1/events'");
  EXPECT_NE(events.find("event: job\ndata: {"), std::string::npos) << events;
  EXPECT_NE(events.find("\"id\":\"" + id + "\""), std::string::npos) << events;
  EXPECT_EQ(events.find((*bobs)["id"].get<std::string>()), std::string::npos) << events;
  // An id from another run of the server asks the client to start over.
  std::string stale = Shell(cluster_.curl() + " -N --max-time 2 " + auth +
                               " -H 'Last-Event-ID: 00000000.5' '" + cluster_.url() + "/v1/events'");
  EXPECT_NE(stale.find("event: reset"), std::string::npos) << stale;
}

TEST_F(ConsoleTest, AJobsTelemetryIsPushedWithEachHeartbeatUntilItEnds) {
  auto alice = cluster_.ClientFor(alice_);
  std::string id = SubmitOk(*alice, {{"command", {"sleep", "4"}}, {"resources", {{"gpu_count", 1}}}});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] {
    auto j = alice->Call("GET", "/v1/jobs/" + id);
    return j.ok() && (*j)["status"] == "running";
  }));
  const std::string auth = "-H 'Authorization: Bearer " + alice_ + "'";
  // The stream ends by itself when the job does, well before curl's 60 s.
  std::string events = Shell(cluster_.curl() + " -N --max-time 60 " + auth + " '" + cluster_.url() +
                             "/v1/jobs/" + id + "/telemetry?follow=true'; echo rc=$?");
  EXPECT_EQ(events.rfind("rc=0\n"), events.size() - 5) << events;
  EXPECT_EQ(events.find("retry: 2000\nevent: telemetry\ndata: {"), 0u) << events;
  size_t readings = 0;
  for (size_t at = events.find("event: reading\ndata: {"); at != std::string::npos;
       at = events.find("event: reading\ndata: {", at + 1)) {
    ++readings;
  }
  // Four seconds of 500 ms heartbeats, on a machine that may be busy.
  EXPECT_GE(readings, 2u) << events;
  EXPECT_NE(events.find("event: end\ndata: {}\n\n"), std::string::npos) << events;
  // Each reading is the job's telemetry without its series.
  size_t r = events.find("event: reading\ndata: ");
  json reading = json::parse(events.substr(r + 21, events.find('\n', r + 21) - r - 21), nullptr, false);
  ASSERT_TRUE(reading.is_object()) << events;
  EXPECT_EQ(reading["job"], id);
  ASSERT_EQ(reading["gpus"].size(), 1u);
  EXPECT_TRUE(reading["gpus"][0]["recent"].empty());
  EXPECT_GT(reading["gpus"][0]["now"]["at"].get<int64_t>(), 0);

  // Bad parameters name themselves; another user's job is not found.
  Http bad = Curl("GET", "/v1/jobs/" + id + "/telemetry?follow=maybe", auth);
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("\"field\":\"follow\""), std::string::npos) << bad.body;
  Http unknown = Curl("GET", "/v1/jobs/" + id + "/telemetry?since=1", auth);
  EXPECT_EQ(unknown.status, 400);
  EXPECT_NE(unknown.body.find("\"field\":\"since\""), std::string::npos) << unknown.body;
  const std::string bob = "-H 'Authorization: Bearer " + cluster_.NewUser("bob") + "'";
  EXPECT_EQ(Curl("GET", "/v1/jobs/" + id + "/telemetry?follow=true", bob).status, 404);
}

// A retry on the same GPUs starts their history again: the stream sends
// the whole series anew rather than readings a client would add to the
// first attempt's.
TEST_F(ConsoleTest, ARetryOnTheSameGpusStartsTheTelemetrySeriesAgain) {
  auto alice = cluster_.ClientFor(alice_);
  std::string id = SubmitOk(*alice, {{"command", {"sh", "-c", "sleep 3; [ \"$TIDE_ATTEMPT\" = 2 ] || exit 3; sleep 3"}},
                                     {"retry_times", 1},
                                     {"resources", {{"gpu_count", 2}}}});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] {
    auto j = alice->Call("GET", "/v1/jobs/" + id);
    return j.ok() && (*j)["status"] == "running";
  }));
  std::string events = Shell(cluster_.curl() + " -N --max-time 90 -H 'Authorization: Bearer " + alice_ +
                             "' '" + cluster_.url() + "/v1/jobs/" + id + "/telemetry?follow=true'");
  auto job = WaitTerminal(*alice, id);
  ASSERT_EQ(api::JobStatusName(job.status), std::string("completed"))
      << api::ToJson(job).dump() << "\n" << events;
  ASSERT_EQ(job.attempt, 2);
  size_t whole = 0;
  std::string last;
  for (size_t at = events.find("event: telemetry\ndata: "); at != std::string::npos;
       at = events.find("event: telemetry\ndata: ", at + 1)) {
    ++whole;
    size_t from = at + 23;
    last = events.substr(from, events.find('\n', from) - from);
  }
  EXPECT_GE(whole, 2u) << events;
  json t = json::parse(last, nullptr, false);
  ASSERT_TRUE(t.is_object()) << last;
  EXPECT_EQ(t["attempt"], 2) << last;
  EXPECT_NE(events.find("event: end"), std::string::npos) << events;
}

TEST_F(ConsoleTest, TheOperatorSeesUsersStandingsAndEachNodesTelemetry) {
  auto alice = cluster_.ClientFor(alice_);
  auto weight = cluster_.admin().Call("PUT", "/v1/admin/users/alice/weight", json{{"weight", 2}});
  ASSERT_TRUE(weight.ok());
  std::string id = SubmitOk(*alice, {{"command", {"sleep", "30"}}, {"resources", {{"gpu_count", 2}}}});
  ASSERT_FALSE(id.empty());
  ASSERT_TRUE(Eventually([&] {
    auto j = alice->Call("GET", "/v1/jobs/" + id);
    return j.ok() && (*j)["status"] == "running";
  }));
  auto users = cluster_.admin().Call("GET", "/v1/admin/users");
  ASSERT_TRUE(users.ok());
  EXPECT_EQ((*users)["half_life_s"], 7 * 24 * 3600);
  json a;
  for (const json& u : (*users)["users"]) {
    if (u["name"] == "alice") a = u;
  }
  ASSERT_TRUE(a.is_object()) << users->dump();
  EXPECT_EQ(a["weight"], 2.0);
  EXPECT_EQ(a["running_jobs"], 1);
  EXPECT_EQ(a["running_gpus"], 2);
  EXPECT_EQ(a["share"], 1.0);  // the only user with work
  EXPECT_TRUE(a["rank"].is_null());  // nothing of hers waits
  EXPECT_TRUE(a["daily_cap"].is_null());
  // `tide admin user ls` prints the same.
  CliResult ls = cluster_.Cli({"admin", "user", "ls"}, cluster_.admin_token());
  EXPECT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("alice"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("1 (2 GPUs)"), std::string::npos) << ls.out;
  EXPECT_NE(ls.out.find("half-life of 7.0 days"), std::string::npos) << ls.out;
  // Users are the operator's to list.
  const std::string as_alice = "-H 'Authorization: Bearer " + alice_ + "'";
  EXPECT_EQ(Curl("GET", "/v1/admin/users", as_alice).status, 403);

  // The node's GPUs over time: the operator's (a1 is the operator's own
  // node), not alice's.
  auto nodes = cluster_.admin().Call("GET", "/v1/nodes");
  ASSERT_TRUE(nodes.ok());
  std::string node = (*nodes)["nodes"][0]["id"];
  ASSERT_TRUE(Eventually([&] {
    auto t = cluster_.admin().Call("GET", "/v1/nodes/a1/telemetry");
    return t.ok() && (*t)["gpus"].size() == 2 && (*t)["gpus"][1]["recent"].size() >= 2;
  }));
  auto brief = cluster_.admin().Call("GET", "/v1/nodes/" + node + "/telemetry?series=false");
  ASSERT_TRUE(brief.ok());
  EXPECT_EQ((*brief)["node"], "a1");
  EXPECT_TRUE((*brief)["gpus"][0]["recent"].empty());
  EXPECT_EQ(Curl("GET", "/v1/nodes/" + node + "/telemetry", as_alice).status, 404);
  Http bad = Curl("GET", "/v1/nodes/a1/telemetry?series=2", "-H 'Authorization: Bearer " +
                                                               cluster_.admin_token() + "'");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.body.find("\"field\":\"series\""), std::string::npos) << bad.body;
  ASSERT_TRUE(alice->Call("POST", "/v1/jobs/" + id + "/cancel").ok());
}

TEST_F(ConsoleTest, YamlAndSbatchConvertToTheJsonTheApiTakes) {
  auto alice = cluster_.ClientFor(alice_);
  auto job = alice->Call("POST", "/v1/convert",
                         json{{"format", "yaml"},
                              {"text", "name: hi\ncommand: [echo, hi]\nresources:\n  gpu_count: 2\n"}});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  EXPECT_EQ((*job)["job"]["name"], "hi");
  EXPECT_EQ((*job)["job"]["resources"]["gpu_count"], 2);
  auto bad = alice->Call("POST", "/v1/convert",
                         json{{"format", "yaml"},
                              {"filename", "train.yaml"},
                              {"text", "command: [echo]\nresources:\n  gpu_count: 0\n"}});
  EXPECT_EQ(bad.status().field(), "resources.gpu_count") << bad.status().ToString();
  EXPECT_NE(bad.status().message().find("train.yaml:3:"), std::string::npos) << bad.status().ToString();
  auto batch = alice->Call("POST", "/v1/convert",
                           json{{"format", "yaml"},
                                {"text", "template:\n  command: [echo, \"{x}\"]\njobs:\n  - {id: a, x: 1}\n"}});
  ASSERT_TRUE(batch.ok()) << batch.status().ToString();
  EXPECT_TRUE((*batch).contains("batch"));
  auto script = alice->Call(
      "POST", "/v1/convert",
      json{{"format", "sbatch"},
           {"filename", "train.sh"},
           {"text", "#!/bin/bash\n#SBATCH --job-name=t\n#SBATCH --gres=gpu:2\n#SBATCH --array=0-3\necho $SLURM_ARRAY_TASK_ID\n"}});
  ASSERT_TRUE(script.ok()) << script.status().ToString();
  EXPECT_EQ((*script)["script_path"], ".tide/sbatch/train.sh");
  EXPECT_TRUE((*script).contains("batch")) << "an array is a batch";
  auto unknown = alice->Call("POST", "/v1/convert",
                             json{{"format", "sbatch"}, {"text", "#SBATCH --frobnicate=1\ntrue\n"}});
  EXPECT_EQ(unknown.status().field(), "text") << unknown.status().ToString();
  EXPECT_NE(unknown.status().message().find("script.sh:1"), std::string::npos)
      << unknown.status().ToString();
  EXPECT_EQ(alice->Call("POST", "/v1/convert", json{{"format", "toml"}, {"text", "x"}}).status().field(),
            "format");
}

TEST_F(ConsoleTest, EveryOutputDownloadsAsOneTar) {
  auto alice = cluster_.ClientFor(alice_);
  auto job = alice->Call(
      "POST", "/v1/jobs",
      json{{"command",
            {"sh", "-c",
             "mkdir -p $TIDE_OUTPUT_DIR/sub && printf one > $TIDE_OUTPUT_DIR/a.txt && "
             "head -c 300000 /dev/urandom > $TIDE_OUTPUT_DIR/sub/b.bin"}}});
  ASSERT_TRUE(job.ok()) << job.status().ToString();
  std::string id = (*job)["id"];
  ASSERT_TRUE(Eventually(
      [&] {
        auto j = alice->Call("GET", "/v1/jobs/" + id);
        return j.ok() && (*j)["status"] == "completed";
      },
      std::chrono::seconds(60)));
  const std::string dir = cluster_.dir();
  const std::string get = cluster_.curl() + " -H 'Authorization: Bearer " + alice_ + "' '" +
                          cluster_.url() + "/v1/jobs/" + id;
  Shell(get + "/outputs.tar' -o " + dir + "/all.tar");
  Shell(get + "/outputs/sub/b.bin' -o " + dir + "/b.bin");
  std::string listed = Shell("tar -tf " + dir + "/all.tar | sort");
  EXPECT_EQ(listed, "a.txt\nsub/b.bin\n");
  std::string same = Shell("mkdir -p " + dir + "/x && tar -xf " + dir + "/all.tar -C " + dir +
                              "/x && cmp " + dir + "/x/sub/b.bin " + dir + "/b.bin && cat " + dir +
                              "/x/a.txt");
  EXPECT_EQ(same, "one");
}

// `tide dev` prints a one-time link into the console as its dev user.
TEST(ConsoleDevTest, TideDevPrintsALoginLinkIntoTheConsole) {
  const std::string dir = MakeTempDir("tide-dev");
  ::chmod(dir.c_str(), 0711);  // the dev agent's sandboxed jobs enter its data dir
  const std::string url = "http://127.0.0.1:" + std::to_string(FreePort());
  Process dev;
  dev.Start({TIDE_BINARY, "dev", "--listen", url.substr(7), "--data-dir", dir + "/.tide"},
            dir + "/dev.log");
  std::string link;
  bool printed = Eventually(
      [&] {
        std::string log = ReadAll(dir + "/dev.log");
        const std::string key = "  console    ";
        size_t at = log.find(key);
        if (at == std::string::npos) return false;
        at += key.size();
        link = log.substr(at, log.find_first_of(" \n", at) - at);
        return true;
      },
      std::chrono::seconds(60));
  EXPECT_TRUE(printed) << ReadAll(dir + "/dev.log");
  EXPECT_EQ(link.rfind(url + "/login?code=tide_l_", 0), 0u) << ReadAll(dir + "/dev.log");
  const std::string jar = dir + "/cookies.txt";
  std::string first = Shell("curl -s -o /dev/null -w '%{http_code} %{redirect_url}' -c " + jar +
                               " '" + link + "'");
  EXPECT_EQ(first, "303 " + url + "/jobs");
  std::string who = Shell("curl -s -b " + jar + " " + url + "/v1/session");
  EXPECT_EQ(json::parse(who, nullptr, false).value("user", ""), "dev") << who;
  dev.Signal(SIGINT);
  if (dev.Wait(std::chrono::seconds(30)) < 0) dev.Signal(SIGKILL);
  std::system(("rm -rf " + dir).c_str());
}

}  // namespace
}  // namespace tide::e2e
