// Package wiretest holds helpers shared by the Kafka listener's tests.
package wiretest

import "reflect"

// Populate fills a request body for tests: one element in every slice of
// structs, strings and int32s, and "x" in every string, so that every
// per-item error field of the response has an item to go in.
func Populate(v reflect.Value) { populate(v, 0) }

func populate(v reflect.Value, depth int) {
	if depth > 6 {
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			if v.Type().Elem().Kind() == reflect.String && v.CanSet() {
				s := "x"
				v.Set(reflect.ValueOf(&s))
			}
			return
		}
		populate(v.Elem(), depth+1)
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				populate(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if !v.CanSet() || v.Len() > 0 {
			return
		}
		et := v.Type().Elem()
		e := reflect.New(et)
		switch et.Kind() {
		case reflect.Struct:
			if d, ok := e.Interface().(interface{ Default() }); ok {
				d.Default()
			}
			populate(e.Elem(), depth+1)
		case reflect.String:
			e.Elem().SetString("x")
		case reflect.Int32:
		default:
			return
		}
		v.Set(reflect.Append(v, e.Elem()))
	case reflect.String:
		if v.CanSet() && v.String() == "" {
			v.SetString("x")
		}
	}
}
