// --attr value typing by op spec.

#include "client/attr_parse.h"

#include <gtest/gtest.h>

namespace tensord::cli {
namespace {

OpInfo sumLike() {
  OpInfo op;
  op.name = "sum";
  op.attrs = {
      {"dim", "int", true, int64_t(0), ""},
      {"keepdim", "bool", false, false, ""},
      {"eps", "float", false, 1e-5, ""},
      {"mode", "text", false, std::string("x"), ""},
      {"dims", "ints", false, std::vector<int64_t>{}, ""},
      {"weights", "floats", false, std::vector<double>{}, ""},
  };
  return op;
}

std::string errorOf(const std::vector<std::string>& assignments) {
  try {
    parseAttrs(sumLike(), assignments);
  } catch (const AttrError& e) {
    return e.what();
  }
  return "no error";
}

TEST(AttrParse, TypesEachKind) {
  Attrs attrs =
      parseAttrs(sumLike(), {"dim=-1", "keepdim=true", "eps=0.5", "mode=fast path", "dims=0,2", "weights=[0.5, 1e3]"});
  ASSERT_EQ(attrs.size(), 6u);
  EXPECT_EQ(attrs[0], (std::pair<std::string, AttrValue>{"dim", int64_t(-1)}));
  EXPECT_EQ(attrs[1].second, AttrValue(true));
  EXPECT_EQ(attrs[2].second, AttrValue(0.5));
  EXPECT_EQ(attrs[3].second, AttrValue(std::string("fast path")));
  EXPECT_EQ(attrs[4].second, AttrValue(std::vector<int64_t>{0, 2}));
  EXPECT_EQ(attrs[5].second, AttrValue(std::vector<double>{0.5, 1000}));
}

TEST(AttrParse, ScalarKeepsIntOrFloat) {
  AttrSpec scalar{"other", "scalar", false, {}, ""};
  EXPECT_EQ(parseAttrValue("add", scalar, "2"), AttrValue(int64_t(2)));
  EXPECT_EQ(parseAttrValue("add", scalar, "-7"), AttrValue(int64_t(-7)));
  EXPECT_EQ(parseAttrValue("add", scalar, "2.5"), AttrValue(2.5));
  EXPECT_EQ(parseAttrValue("add", scalar, "2.0"), AttrValue(2.0));
  EXPECT_EQ(parseAttrValue("add", scalar, "1e3"), AttrValue(1000.0));
  EXPECT_EQ(parseAttrValue("add", scalar, "true"), AttrValue(true));
  try {
    parseAttrValue("add", scalar, "two");
    ADD_FAILURE() << "'two' parsed as a scalar";
  } catch (const AttrError& e) {
    EXPECT_STREQ(e.what(),
                 "add: attr 'other' expects a number (2 is sent as an int, 2.5 or 2.0 as a float) or true/false; "
                 "got 'two'");
  }
}

TEST(AttrParse, EdgeValues) {
  AttrSpec ints{"dims", "ints", false, {}, ""};
  EXPECT_EQ(parseAttrValue("op", ints, ""), AttrValue(std::vector<int64_t>{}));
  EXPECT_EQ(parseAttrValue("op", ints, "[]"), AttrValue(std::vector<int64_t>{}));
  EXPECT_EQ(parseAttrValue("op", ints, " 3 , -4 "), AttrValue(std::vector<int64_t>{3, -4}));
  AttrSpec f{"x", "float", false, {}, ""};
  EXPECT_EQ(parseAttrValue("op", f, "3"), AttrValue(3.0));
  EXPECT_EQ(parseAttrValue("op", f, "+2.5"), AttrValue(2.5));
  AttrSpec i{"x", "int", false, {}, ""};
  EXPECT_EQ(parseAttrValue("op", i, "9223372036854775807"), AttrValue(int64_t(9223372036854775807)));
  AttrSpec t{"x", "text", false, {}, ""};
  EXPECT_EQ(parseAttrValue("op", t, "a=b"), AttrValue(std::string("a=b")));
}

TEST(AttrParse, UnknownNameListsTheAttrs) {
  std::string message = errorOf({"axis=1"});
  EXPECT_NE(message.find("sum has no attr 'axis'; its attrs: dim (int), keepdim (bool)"), std::string::npos) << message;
  OpInfo none;
  none.name = "relu";
  try {
    parseAttrs(none, {"x=1"});
    FAIL();
  } catch (const AttrError& e) {
    EXPECT_NE(std::string(e.what()).find("relu has no attr 'x'; it takes no attrs"), std::string::npos);
  }
}

TEST(AttrParse, WrongTypesSayWhatWasExpected) {
  EXPECT_EQ(errorOf({"dim=1.5"}), "sum: attr 'dim' expects an integer; got '1.5'");
  EXPECT_EQ(errorOf({"dim="}), "sum: attr 'dim' expects an integer; got ''");
  EXPECT_EQ(errorOf({"dim=99999999999999999999"}), "sum: attr 'dim' expects an integer; got '99999999999999999999'");
  EXPECT_EQ(errorOf({"keepdim=yes"}), "sum: attr 'keepdim' expects true or false; got 'yes'");
  EXPECT_EQ(errorOf({"eps=small"}), "sum: attr 'eps' expects a number; got 'small'");
  EXPECT_EQ(errorOf({"dims=1,x"}), "sum: attr 'dims' expects comma-separated integers, e.g. 0,1; got '1,x'");
  EXPECT_EQ(errorOf({"dims=1,,2"}), "sum: attr 'dims' expects comma-separated integers, e.g. 0,1; got '1,,2'");
  EXPECT_EQ(errorOf({"weights=0.5;1"}), "sum: attr 'weights' expects comma-separated numbers, e.g. 0.5,1; got '0.5;1'");
}

TEST(AttrParse, MalformedAssignments) {
  EXPECT_EQ(errorOf({"dim"}), "sum: --attr expects key=value; got 'dim'");
  EXPECT_EQ(errorOf({"=3"}), "sum: --attr expects key=value; got '=3'");
  EXPECT_EQ(errorOf({"dim=1", "dim=2"}), "sum: attr 'dim' is given twice");
}

TEST(AttrParse, FormatsValues) {
  EXPECT_EQ(formatAttrValue(int64_t(3)), "3");
  EXPECT_EQ(formatAttrValue(0.5), "0.5");
  EXPECT_EQ(formatAttrValue(false), "false");
  EXPECT_EQ(formatAttrValue(std::string("a")), "'a'");
  EXPECT_EQ(formatAttrValue(std::vector<int64_t>{1, 2}), "[1, 2]");
  EXPECT_EQ(formatAttrValue(std::vector<double>{}), "[]");
}

}  // namespace
}  // namespace tensord::cli
