package main

import (
	"bytes"
	"testing"
)

// Every --json object comes out of one exporter: "command" first, lists
// never null, however deep.
func TestExportJSON(t *testing.T) {
	t.Parallel()
	type inner struct {
		Tags []string `json:"tags"`
	}
	type Flat struct {
		Flat []int `json:"flat"`
	}
	var out bytes.Buffer
	a := &app{stdout: &out}
	body := struct {
		Items []int    `json:"items"`
		Inner *inner   `json:"inner"`
		Rows  []inner  `json:"rows"`
		None  *inner   `json:"none"`
		hide  []string // unexported: left alone
		Flat
	}{Inner: &inner{}, Rows: []inner{{}}}
	if err := a.exportJSON("demo", body); err != nil {
		t.Fatal(err)
	}
	want := `{
  "command": "demo",
  "items": [],
  "inner": {
    "tags": []
  },
  "rows": [
    {
      "tags": []
    }
  ],
  "none": null,
  "flat": []
}
`
	if out.String() != want {
		t.Errorf("got\n%s\nwant\n%s", out.String(), want)
	}
	if body.Inner.Tags != nil {
		t.Error("the exporter changed the caller's value")
	}
	out.Reset()
	if err := a.exportJSON("empty", struct{}{}); err != nil || out.String() != "{\n  \"command\": \"empty\"\n}\n" {
		t.Errorf("empty body: %q %v", out.String(), err)
	}
}
