package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// allTopics is the interface's topic list, used when GET
// /v1/me/webhooks/topics does not answer.
var allTopics = []string{"order.created", "order.status_updated", "order.cancelled", "tracking.created", "tracking.updated"}

type webhookView struct {
	ID                  string  `json:"id"`
	URL                 string  `json:"url"`
	Description         *string `json:"description"`
	IsActive            bool    `json:"is_active"`
	ConsecutiveFailures int     `json:"consecutive_failures"`
	DisabledReason      *string `json:"disabled_reason"`
	Secret              string  `json:"secret"`
}

// descPrefix marks the webhooks podbench registers, so a later run can
// remove ones a killed run left behind.
const descPrefix = "podbench "

// topics lists the subscribable topics as the API reports them.
func topics(ctx context.Context, a *api) []string {
	var res struct {
		Data []struct {
			Topic string `json:"topic"`
		} `json:"data"`
	}
	if err := a.call(ctx, "GET", "/v1/me/webhooks/topics", nil, &res); err != nil || len(res.Data) == 0 {
		return allTopics
	}
	var out []string
	for _, t := range res.Data {
		out = append(out, t.Topic)
	}
	return out
}

// registerWebhook subscribes url to every topic. When the account already
// has 5 webhooks it removes the podbench ones of earlier runs and tries once
// more.
func registerWebhook(ctx context.Context, a *api, target, desc string, topics []string) (webhookView, error) {
	body := map[string]any{"url": target, "topics": topics, "description": descPrefix + desc}
	var w webhookView
	err := a.call(ctx, "POST", "/v1/me/webhooks", body, &w)
	var ae *apiError
	if errors.As(err, &ae) && ae.Code == "WEBHOOK_LIMIT_REACHED" {
		if n, derr := deleteStaleWebhooks(ctx, a); derr == nil && n > 0 {
			say("removed %d webhook(s) left by earlier podbench runs", n)
			err = a.call(ctx, "POST", "/v1/me/webhooks", body, &w)
		}
	}
	if errors.As(err, &ae) && ae.Code == "INVALID_WEBHOOK_URL" {
		host := target
		if u, perr := url.Parse(target); perr == nil {
			host = u.Host
		}
		return w, fmt.Errorf("%w\n  (the service refuses the loopback receiver: start podsvc with POD_WEBHOOK_ALLOW_TARGETS=%s and pass a fixed --receiver-addr)", err, host)
	}
	if err == nil && w.Secret == "" {
		err = fmt.Errorf("POST /v1/me/webhooks answered no secret")
	}
	return w, err
}

// deleteStaleWebhooks removes the account's webhooks whose description
// marks them as podbench's.
func deleteStaleWebhooks(ctx context.Context, a *api) (int, error) {
	var page struct {
		Data []webhookView `json:"data"`
	}
	if err := a.call(ctx, "GET", "/v1/me/webhooks?limit=100", nil, &page); err != nil {
		return 0, err
	}
	n := 0
	for _, w := range page.Data {
		if w.Description != nil && strings.HasPrefix(*w.Description, descPrefix) {
			if err := a.call(ctx, "DELETE", "/v1/me/webhooks/"+w.ID, nil, nil); err == nil {
				n++
			}
		}
	}
	return n, nil
}

// webhookState reads a webhook (nine fields, no secret).
func webhookState(ctx context.Context, a *api, id string) (webhookView, error) {
	var w webhookView
	err := a.call(ctx, "GET", "/v1/me/webhooks/"+id, nil, &w)
	return w, err
}
