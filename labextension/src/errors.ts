/**
 * The kernel's word on where a %%mtsql cell's error lies: an execute reply's payload (the magic
 * writes it; front ends that do not know it ignore it and show the error's text alone).
 */
import { CodeCell } from '@jupyterlab/cells';
import { CodeMirrorEditor } from '@jupyterlab/codemirror';
import { INotebookTracker, NotebookPanel } from '@jupyterlab/notebook';
import { Kernel, KernelMessage } from '@jupyterlab/services';

import { Diagnostic, showError } from './cells';

const PAYLOAD = 'mt_magic.diagnostic'; // mt_magic/notebook/magic.py's DIAGNOSTIC_PAYLOAD

function replied(panel: NotebookPanel, args: Kernel.IAnyMessageArgs): void {
  const { msg, direction } = args;
  if (direction !== 'recv' || msg.header.msg_type !== 'execute_reply') {
    return;
  }
  const request = (msg.parent_header as KernelMessage.IHeader).msg_id;
  const cell = panel.content.widgets.find(
    widget => widget instanceof CodeCell && widget.outputArea.future?.msg.header.msg_id === request
  ) as CodeCell | undefined;
  const editor = cell?.editor as CodeMirrorEditor | null | undefined;
  if (!editor) {
    return;
  }
  const payload = ((msg.content as { payload?: Record<string, unknown>[] }).payload ?? []).find(
    item => item.source === PAYLOAD
  );
  showError(editor.editor, payload ? (payload as unknown as Diagnostic) : null);
}

/** Each notebook's kernel, whichever it is now, is listened to for the replies to its cells. */
export function followErrors(notebooks: INotebookTracker): void {
  notebooks.widgetAdded.connect((_, panel) => {
    const listener = (_kernel: Kernel.IKernelConnection, args: Kernel.IAnyMessageArgs) =>
      replied(panel, args);
    panel.sessionContext.session?.kernel?.anyMessage.connect(listener);
    panel.sessionContext.kernelChanged.connect((_context, change) => {
      change.oldValue?.anyMessage.disconnect(listener);
      change.newValue?.anyMessage.connect(listener);
    });
  });
}
