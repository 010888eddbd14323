// Package jsonscantest holds the bodies the JSON member scan's tests and
// the proxy's body-editing fuzz tests start from. Tests only.
package jsonscantest

// Seeds are bodies of every shape a scan meets, valid or not.
var Seeds = []string{
	``, ` `, `{}`, `[]`, `""`, `0`, `-0`, `01`, `1.`, `.5`, `1e`, `1e+5`, `-1.25E-3`, `+1`,
	`true`, `tru`, `nul`, `null `, ` false`, `{"a":1,}`, `[1,]`, `[,1]`, `{"a" 1}`, `{a:1}`,
	`{"a":1}{"b":2}`, `"\u00e9"`, `"\u00g9"`, `"\x"`, "\"a\tb\"", "[\"\x01\"]", "\x01", "{\"a\":1}\x00", `"\/\b\f\n\r\t\"\\"`,
	`"unterminated`, `"12345678901234567\"890"`, `["abcdefgh\\","ijklmnop"]`,
	`{"model":"gpt-5","input":[{"role":"user","content":"hi"}],"stream":true}`,
	"{\"k\\u0065y\":\"v\\n\", \"n\":[1,2,{\"x\":null}]}\n", `{"a":{"b":{"c":[[[]]]}}}`,
	// Conversations: more elements than a scan notes, a role after the
	// content, a role that is not a string, a second conversation key.
	`{"messages":[1,"a",{"role":"system"},{},[],null,true,{"content":"x","role":"user"},{"role":2},{"role":"user"}],"input":[{"role":"user"}]}`,
	`{"input":"one turn","messages":[{"content":{"a":"\"role\""},"role":"developer"}]}`, `{"input":[]}`,
	"\"caf\xc3\xa9\"", `"aaaaaaaaaaaaaaaaaaaaaa\"\u00e9bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb\\"`, `"aaaaaaaaaaaaaaaaaaaaaaaaaa\`, `[1 2]`, `{"a":1 "b":2}`, `{"":""}`, `[-]`, `[1e5.0]`,
}
