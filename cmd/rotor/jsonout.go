package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
)

// exportJSON prints body as the one pretty-printed JSON object of a
// --json command (docs/commands.md): "command" first, naming the command family,
// then body's members, with every list present as [] rather than null.
// It is the only place --json output is made, as gh's exporter is.
func (a *app) exportJSON(command string, body any) error {
	v := reflect.New(reflect.TypeOf(body)).Elem()
	v.Set(reflect.ValueOf(body))
	emptyLists(v)
	raw, err := json.Marshal(v.Interface())
	if err != nil {
		return err
	}
	if len(raw) < 2 || raw[0] != '{' {
		return fmt.Errorf("--json body of %s is not an object", command)
	}
	name, _ := json.Marshal(command)
	obj := append([]byte(`{"command":`), name...)
	if len(raw) > 2 {
		obj = append(obj, ',')
	}
	obj = append(obj, raw[1:]...)
	var out bytes.Buffer
	if err := json.Indent(&out, obj, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = a.stdout.Write(out.Bytes())
	return err
}

// emptyLists replaces every nil slice reachable in v (a settable value)
// with an empty one, so JSON shows [] for "none" and consumers never meet
// null where they expect a list. It copies the pointers and slices it goes
// through first, so the caller's values are never changed.
func emptyLists(v reflect.Value) {
	if !v.CanSet() {
		return // inside an unexported embedded struct: out of reach
	}
	switch v.Kind() {
	case reflect.Slice:
		if v.IsNil() {
			v.Set(reflect.MakeSlice(v.Type(), 0, 0))
			return
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		for i := range c.Len() {
			emptyLists(c.Index(i))
		}
		v.Set(c)
	case reflect.Pointer:
		if !v.IsNil() {
			c := reflect.New(v.Type().Elem())
			c.Elem().Set(v.Elem())
			emptyLists(c.Elem())
			v.Set(c)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				emptyLists(v.Field(i))
			}
		}
	}
}
