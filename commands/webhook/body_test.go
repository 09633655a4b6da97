package webhook

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/printpod/pod/schemas"
)

func TestDecodeBody(t *testing.T) {
	refuseInternal := func(u string) error {
		if strings.Contains(u, "127.0.0.1") {
			return errors.New("the url points at a private or local address")
		}
		return nil
	}
	str := func(s string) *string { return &s }
	yes := true
	for _, tc := range []struct {
		name      string
		raw       string
		patch     bool
		want      Body
		wantCode  string // "" = accepted
		wantField string
	}{
		{"a create needs only url and topics", `{"url":"https://shop.example/h","topics":["order.created"]}`, false,
			Body{URL: str("https://shop.example/h"), Topics: []string{"order.created"}}, "", ""},
		{"a create keeps its description", `{"url":"https://shop.example/h","topics":["order.created"],"description":"orders"}`, false,
			Body{URL: str("https://shop.example/h"), Topics: []string{"order.created"}, Description: str("orders"), SetDescription: true}, "", ""},
		{"a topic named twice is kept once", `{"url":"https://shop.example/h","topics":["order.created","order.created"]}`, false,
			Body{URL: str("https://shop.example/h"), Topics: []string{"order.created"}}, "", ""},
		{"a create without url is refused", `{"topics":["order.created"]}`, false, Body{}, schemas.CodeValidation, "url"},
		{"a create without topics is refused", `{"url":"https://shop.example/h"}`, false, Body{}, schemas.CodeValidation, "topics"},
		{"an empty topic list is refused", `{"url":"https://shop.example/h","topics":[]}`, false, Body{}, schemas.CodeValidation, "topics"},
		{"an unknown topic is refused by its index", `{"url":"https://shop.example/h","topics":["order.created","order.exploded"]}`, false, Body{}, schemas.CodeValidation, "topics[1]"},
		{"webhook.test cannot be subscribed to", `{"url":"https://shop.example/h","topics":["webhook.test"]}`, false, Body{}, schemas.CodeValidation, "topics[0]"},
		{"a url the guard refuses is INVALID_WEBHOOK_URL", `{"url":"http://127.0.0.1/h","topics":["order.created"]}`, false, Body{}, schemas.CodeInvalidWebhookURL, "url"},
		{"a url that is not a string is refused", `{"url":5,"topics":["order.created"]}`, false, Body{}, schemas.CodeValidation, "url"},
		{"is_active cannot be set on creation", `{"url":"https://shop.example/h","topics":["order.created"],"is_active":true}`, false, Body{}, schemas.CodeValidation, "is_active"},
		{"an unknown field is refused by name", `{"url":"https://shop.example/h","topics":["order.created"],"secret":"x"}`, false, Body{}, schemas.CodeValidation, "secret"},
		{"a body that is not an object is refused", `[1,2]`, false, Body{}, schemas.CodeValidation, ""},
		{"a patch may set is_active alone", `{"is_active":true}`, true, Body{IsActive: &yes}, "", ""},
		{"a patch may clear the description with null", `{"description":null}`, true, Body{SetDescription: true}, "", ""},
		{"a patch may not null the url", `{"url":null}`, true, Body{}, schemas.CodeValidation, "url"},
		{"a patch may not null is_active", `{"is_active":null}`, true, Body{}, schemas.CodeValidation, "is_active"},
		{"an empty patch is refused", `{}`, true, Body{}, schemas.CodeValidation, ""},
		{"a description over the limit is refused", `{"description":"` + strings.Repeat("é", MaxDescription+1) + `"}`, true, Body{}, schemas.CodeValidation, "description"},
		{"a description at the limit is taken", `{"description":"` + strings.Repeat("é", MaxDescription) + `"}`, true,
			Body{Description: str(strings.Repeat("é", MaxDescription)), SetDescription: true}, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeBody([]byte(tc.raw), tc.patch, refuseInternal)
			if tc.wantCode == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("DecodeBody = %+v, want %+v", got, tc.want)
				}
				return
			}
			var be *BodyError
			if !errors.As(err, &be) {
				t.Fatalf("error = %v, want a BodyError %s on %q", err, tc.wantCode, tc.wantField)
			}
			if be.Code != tc.wantCode || be.Field != tc.wantField {
				t.Fatalf("refused with %s on %q (%s), want %s on %q", be.Code, be.Field, be.Message, tc.wantCode, tc.wantField)
			}
		})
	}
}
