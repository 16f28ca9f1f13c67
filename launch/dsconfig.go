package launch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"

	"github.com/hjson/hjson-go/v4"
)

// jsonObject is a JSON object edited in place: keys keep their order and
// values their exact text, so a rewritten DeepSpeed config differs from the
// user's only where the plan requires.
type jsonObject struct {
	keys []string
	vals map[string]json.RawMessage
}

func parseObject(data []byte) (*jsonObject, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := &jsonObject{vals: map[string]json.RawMessage{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		k := tok.(string) // object keys are always strings
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
		if _, dup := o.vals[k]; dup {
			// DeepSpeed rejects duplicate keys; so do we.
			return nil, fmt.Errorf("duplicate key %q", k)
		}
		o.keys = append(o.keys, k)
		o.vals[k] = raw
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("trailing data after the JSON object")
	}
	return o, nil
}

// parseConfig reads a user's DeepSpeed config. DeepSpeed loads it as Hjson
// (comments, trailing commas, unquoted keys and strings), a superset of
// JSON. Strict JSON is tried first, since it keeps every value's text as
// written; other Hjson is converted to JSON with its numbers' text kept.
func parseConfig(data []byte) (*jsonObject, error) {
	o, err := parseObject(data)
	if err == nil || json.Valid(data) {
		return o, err
	}
	var om hjson.OrderedMap
	// DeepSpeed refuses duplicate keys at any depth; so does this.
	if err := hjson.UnmarshalWithOptions(data, &om, hjson.DecoderOptions{UseJSONNumber: true, DisallowDuplicateKeys: true}); err != nil {
		return nil, fmt.Errorf("neither JSON nor Hjson: %w", err)
	}
	js, err := json.Marshal(&om)
	if err != nil {
		return nil, err
	}
	return parseObject(js)
}

func (o *jsonObject) has(k string) bool { _, ok := o.vals[k]; return ok }

// isAuto reports whether k is "auto": the Hugging Face Trainer's
// placeholder, which it replaces with its TrainingArguments' value.
func (o *jsonObject) isAuto(k string) bool { return string(o.vals[k]) == `"auto"` }

// set stores raw under k, in k's place when present, else at the end.
func (o *jsonObject) set(k string, raw json.RawMessage) {
	if !o.has(k) {
		o.keys = append(o.keys, k)
	}
	o.vals[k] = raw
}

func (o *jsonObject) setInt(k string, n int)   { o.set(k, json.RawMessage(strconv.Itoa(n))) }
func (o *jsonObject) setBool(k string, v bool) { o.set(k, json.RawMessage(strconv.FormatBool(v))) }
func (o *jsonObject) setString(k string, v string) {
	raw, _ := json.Marshal(v) // marshalling a string cannot fail
	o.set(k, raw)
}

// setObject stores sub under k.
func (o *jsonObject) setObject(k string, sub *jsonObject) error {
	raw, err := sub.MarshalJSON()
	if err != nil {
		return err
	}
	o.set(k, raw)
	return nil
}

func (o *jsonObject) del(k string) {
	if o.has(k) {
		delete(o.vals, k)
		o.keys = slices.DeleteFunc(o.keys, func(s string) bool { return s == k })
	}
}

// object returns the object under k, parsed, or nil when k is absent or null.
func (o *jsonObject) object(k string) (*jsonObject, error) {
	raw, ok := o.vals[k]
	if !ok || string(raw) == "null" {
		return nil, nil
	}
	sub, err := parseObject(raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", k, err)
	}
	return sub, nil
}

// intVal reads k as an integer; ok is false when k is absent or "auto",
// which states no value of its own.
func (o *jsonObject) intVal(k string) (n int, ok bool, err error) {
	raw, present := o.vals[k]
	if !present || o.isAuto(k) {
		return 0, false, nil
	}
	n, err = strconv.Atoi(string(raw))
	if err != nil {
		return 0, true, fmt.Errorf("%w: %s=%s is not an integer", ErrBadInput, k, clip(string(raw)))
	}
	return n, true, nil
}

// str reads k as a string; "" when absent or not a string.
func (o *jsonObject) str(k string) string {
	var s string
	if raw, ok := o.vals[k]; ok && json.Unmarshal(raw, &s) == nil {
		return s
	}
	return ""
}

// MarshalJSON writes the object compactly, keys in order.
func (o *jsonObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := json.Marshal(k)
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		if err := json.Compact(&b, o.vals[k]); err != nil {
			return nil, fmt.Errorf("key %q: %w", k, err)
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// indented renders the object for a config file.
func (o *jsonObject) indented() ([]byte, error) {
	compact, err := o.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, compact, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

func newObject() *jsonObject { return &jsonObject{vals: map[string]json.RawMessage{}} }
